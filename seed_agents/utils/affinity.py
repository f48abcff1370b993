"""Pinning a process to one CPU: runners that keep their emulators on one core's caches.

On Pong (`benchmarks/atari_throughput.py`, 2 cores, two runner processes beside the
inference server) runners pinned one per core acted 2-3% faster and left the cores idle
less than runners the scheduler moved about: an emulator's state stays in the caches of
the core it ran on, and the server's threads, left free, take whichever core is between
runner steps. Sample Factory pins its workers the same way.
"""

from __future__ import annotations

import os


def pin_to_cpu(index: int) -> int | None:
    """Pins the calling thread (and the threads it starts later) to the `index`-th of the
    CPUs this process may run on, counted modulo their number; returns that CPU, or None
    where the operating system offers no affinity (macOS, Windows).

    Call it first in a process, before its libraries start threads: those started
    earlier keep the CPUs they had.
    """
    if index < 0:
        raise ValueError(f"a CPU index must be >= 0, got {index}.")
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[index % len(allowed)]
    os.sched_setaffinity(0, {cpu})
    return cpu
