"""Nodes that stand for a learner at a stop, for the backends' stop tests: one that goes on
computing after it is asked to stop (its step in flight, then its last save) and one
blocked in a call that never returns (a Reverb call whose peer is gone). Each writes
`marker` once it gets to its end. Light on purpose: a Ray worker imports this module to
run them, and TensorFlow would cost it seconds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def computes_after_its_stop(context: Any, compute_s: float, marker: str) -> None:
    """Once asked to stop, computes for `compute_s` more (one core), then writes `marker`."""
    context.stop_event.wait()
    end = time.monotonic() + compute_s
    while time.monotonic() < end:
        sum(range(100_000))
    Path(marker).write_text("saved")


def blocks_after_its_stop(context: Any, block_s: float, marker: str) -> None:
    """Once asked to stop, sleeps `block_s` (using no CPU), then writes `marker`."""
    context.stop_event.wait()
    time.sleep(block_s)
    Path(marker).write_text("returned")


def stops_at_once(context: Any, marker: str) -> None:
    """A replay: returns as soon as it is asked to stop, writing `marker`."""
    context.stop_event.wait()
    Path(marker).write_text("stopped")
