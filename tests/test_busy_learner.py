"""`launch.backends.busy_learner`: a stop tells a computing learner from a blocked one, for real
(spawned processes standing for a learner)."""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import time

from launch.backends.busy_learner import computing, wait_while_computing


def _eventually(condition, tries: int = 20) -> bool:
    return any(condition() for _ in range(tries))


def _computing(process) -> bool:
    return computing(process.pid, process.join, lambda: process.exitcode is None)


def _wait(process, deadline: float, hurry: threading.Event) -> None:
    wait_while_computing(process.pid, process.join, lambda: process.exitcode is None,
                         deadline, hurry)


def test_a_stop_waits_for_a_computing_learner_but_not_for_a_blocked_one():
    # Real processes standing for a learner: one computing (summing a long range, its
    # step), one blocked (sleeping, as in a Reverb call), one that never ends.
    spawn = multiprocessing.get_context("spawn")
    busy = spawn.Process(target=sum, args=(range(60_000_000),), daemon=True)
    blocked = spawn.Process(target=time.sleep, args=(300,), daemon=True)
    endless = spawn.Process(target=sum, args=(itertools.count(),), daemon=True)
    processes = [busy, blocked, endless]
    for process in processes:
        process.start()
    try:
        hurry = threading.Event()
        # Seen as blocked once past its start, and not waited for: it is left running.
        assert _eventually(lambda: not _computing(blocked))
        _wait(blocked, time.monotonic() + 600, hurry)
        assert blocked.exitcode is None
        # A computing one is waited for until it ends by itself.
        _wait(busy, time.monotonic() + 600, hurry)
        assert busy.exitcode == 0
        # One that computes on is waited for up to the deadline, then left to the caller.
        start = time.monotonic()
        _wait(endless, start + 3.0, hurry)
        assert endless.exitcode is None and time.monotonic() - start >= 3.0
        # A second Ctrl-C (hurry) ends the wait at once.
        hurry.set()
        start = time.monotonic()
        _wait(endless, start + 600, hurry)
        assert endless.exitcode is None and time.monotonic() - start < 60.0
        assert _eventually(lambda: _computing(endless)) and not _computing(busy)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(10)
