"""The suite's own checks (`tests/leaks.py`): a slow garbage collection says where it was."""

from __future__ import annotations

import gc
import time

from tests import leaks


class _SlowToFree:
    """Refers to itself, so only a collection frees it; its finalizer waits, as a freed
    server joining its threads does."""

    def __init__(self, seconds: float):
        self.seconds, self.cycle = seconds, self

    def __del__(self):
        time.sleep(self.seconds)


def test_a_slow_collection_names_the_finalizer_it_was_in():
    gc.collect()  # what earlier tests left (seconds of native destructors, under load)
    gc.disable()  # no automatic collection may free it before the one measured
    try:
        _SlowToFree(3.0)
        # Looked at 15 times: on a loaded machine the walk to it alone took over 0.3 s
        # (a fresh-clone run), so the finalizer is what most looks see, not every one.
        seconds, where = leaks.collect_garbage(look_every_s=0.2)
    finally:
        gc.enable()
    assert seconds >= 3.0
    assert where.startswith("tests/test_leaks.py:") and "in __del__" in where, where
    seconds, where = leaks.collect_garbage(look_every_s=30.0)
    assert where == "" or seconds >= 30.0  # a look only once it has run that long
