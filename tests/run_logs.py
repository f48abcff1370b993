"""Reading a live run's logs from a test: how far it has got (its `train.csv`); stopping
it once it has got far enough."""

from __future__ import annotations

import csv
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def last_env_steps(logdir: Path) -> int:
    """The env steps of the last row of `logdir/train.csv`; 0 before it has a row."""
    try:
        with open(logdir / "train.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return int(float(rows[-1]["env_steps"])) if rows else 0


def interrupt_when(process: subprocess.Popen, ready: Callable[[], bool],
                   timeout_s: float = 300.0) -> str:
    """Waits until `ready()` while `process` runs, then sends SIGINT to it alone (as
    `kill -INT` would: not to its process group), and returns its output (stdout with
    stderr) once it exits; a process that never gets ready, or outlives the stop, fails
    the test and is killed."""
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert process.poll() is None and time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return output
