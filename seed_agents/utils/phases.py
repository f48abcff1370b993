"""Benchmark phases in spawned processes that all count over one common window.

A window that opens after a fixed delay measures nothing on a busy machine: processes
that took longer to spawn, import or trace than the delay miss it, and a rate of 0
becomes a meaningless ratio. Here every process reports ready first (a barrier); the
window opens `warmup_s` after the last report, whatever start-up cost.

    def child(*args, ready, windows, results):   # what `run_in_window` runs
        ...build, connect, trace...
        start, end = wait_for_window(ready, windows)
        ...count what happens in [start, end)...
        results.put(counts)

Only the standard library: spawned children import this module before anything heavy.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any


def wait_for_window(ready: Any, windows: Any) -> tuple[float, float]:
    """In a child: reports it ready, blocks until the common (start, end) window (the
    `time.monotonic` clock, which all processes of a machine share) is announced."""
    ready.put(os.getpid())
    return windows.get()


def run_in_window(
    target: Callable[..., None],
    args_per_process: list[tuple],
    warmup_s: float,
    duration_s: float,
    on_window: Callable[[float, float], None] | None = None,
    ready_timeout_s: float = 600.0,
) -> list[Any]:
    """Runs `target(*args, ready, windows, results)` in one spawned process per `args`;
    returns what each puts in `results`, once all are done.

    The window opens `warmup_s` after every process reported ready and lasts
    `duration_s`; `on_window(start, end)` runs as it is announced (e.g. to take this
    process's own readings). Raises `queue.Empty` when a process is not ready within
    `ready_timeout_s` or has no result soon after the window. Spawned, not forked: the
    caller may run TensorFlow and gRPC threads. Every process is stopped on the way out.
    """
    context = multiprocessing.get_context("spawn")
    ready, windows, results = context.Queue(), context.Queue(), context.Queue()
    processes = [context.Process(target=target, args=(*args, ready, windows, results),
                                 daemon=True) for args in args_per_process]
    try:
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=ready_timeout_s)
        start = time.monotonic() + warmup_s
        end = start + duration_s
        if on_window is not None:
            on_window(start, end)
        for _ in processes:
            windows.put((start, end))
        out = [results.get(timeout=warmup_s + duration_s + 120.0) for _ in processes]
        for process in processes:
            process.join(30.0)
        return out
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(10.0)
