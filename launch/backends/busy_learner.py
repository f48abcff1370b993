"""Whether a stopping learner is still computing, read off its process's CPU time.

A stop gives each node a few seconds, but a learner step of a large network on a slow CPU
takes a minute (`atari_ppo_large` in float32 on AVX2: ~55 s), and a learner cut short
loses everything since its last timed checkpoint. A learner that is computing (its step
in flight, then its last save) uses its cores; one blocked in a Reverb or gRPC call,
whose peer is stopping, uses next to none. So a backend waits for the first kind while it
computes, up to a bound, and not for the second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil

#: The longest a stop waits for a learner that is still computing.
BUSY_LEARNER_S = 300.0
# A process that used at least this share of one core over a look is computing.
_BUSY_CPU_SHARE = 0.2
#: How long one look at a process's CPU time takes (a join for that long).
LOOK_S = 1.0
#: What every backend says when it waits (prefixed with its name where it has one).
WAITING = ("the learner is still computing (its step in flight, then its last checkpoint): "
           f"waiting for it, up to {BUSY_LEARNER_S:.0f} s; Ctrl-C again stops it now")


def computing(pid: int, wait: Callable[[float], None], alive: Callable[[], bool],
              look_s: float = LOOK_S) -> bool:
    """Whether process `pid` used at least a fifth of a core over the next `look_s`,
    spent in `wait(look_s)` (a join); False once `alive()` is False or `pid` is gone."""
    try:
        process = psutil.Process(pid)
        before = sum(process.cpu_times()[:2])
        wait(look_s)
        if not alive():
            return False
        return sum(process.cpu_times()[:2]) - before >= _BUSY_CPU_SHARE * look_s
    except psutil.Error:
        return False


def wait_while_computing(pid: int, wait: Callable[[float], None], alive: Callable[[], bool],
                         deadline: float, hurry: threading.Event | None = None) -> None:
    """Waits (with `wait`, a join) while `alive()` and process `pid` keeps computing,
    until `deadline` (time.monotonic) or `hurry` is set; what is left is the caller's."""
    while alive() and not (hurry is not None and hurry.is_set()):
        left_s = deadline - time.monotonic()
        if left_s <= 0 or not computing(pid, wait, alive, min(LOOK_S, left_s)):
            return
