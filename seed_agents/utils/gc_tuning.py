"""Python's garbage collector, tuned for a process that serves many small messages.

The inference service allocates a few dozen short-lived objects per message (futures,
callbacks, numpy views), thousands of messages a second, in a process that also holds a
TensorFlow model's hundreds of thousands of objects. With Python's default thresholds
(a young collection every 700 net allocations, an older one every 10 of those) the
collector's passes cost the service's event loop about a fifth of its CPU at 1,024 runner
streams (measured: 134 -> 106 us of loop CPU per message). Messages make no reference
cycles in the usual case, so collecting less often frees nothing later that matters.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

SERVER_THRESHOLDS = (50_000, 20, 100)


@contextlib.contextmanager
def gc_for_serving(thresholds: tuple[int, int, int] = SERVER_THRESHOLDS) -> Iterator[None]:
    """While open: the objects that exist now (built once, never garbage: the model, the
    program's setup) are frozen out of every collection, and collections are rarer. On
    exit the previous thresholds come back and the frozen objects are collectable again,
    unless the caller had frozen objects before entering: Python cannot unfreeze only
    some, and unfreezing the caller's would undo a decision that is not ours, so then
    everything stays frozen (frozen objects are still freed when unreferenced; only their
    cycles wait).

    Process-wide: open it in the process that serves, once it is built (around the
    learner's inference service), not from library code.
    """
    previous = gc.get_threshold()
    caller_had_frozen = gc.get_freeze_count() > 0
    gc.freeze()
    gc.set_threshold(*thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        if not caller_had_frozen:
            gc.unfreeze()
