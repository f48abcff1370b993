"""Reading a live run's logs from a test: how far it has got (its `train.csv`)."""

from __future__ import annotations

import csv
from pathlib import Path


def last_env_steps(logdir: Path) -> int:
    """The env steps of the last row of `logdir/train.csv`; 0 before it has a row."""
    try:
        with open(logdir / "train.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return int(float(rows[-1]["env_steps"])) if rows else 0
