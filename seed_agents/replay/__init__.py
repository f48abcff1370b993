"""Reverb tables, unroll assembly and writing, and datasets that read unrolls back."""

from seed_agents.replay.dataset import make_dataset
from seed_agents.replay.tables import prioritized_table, queue_table
from seed_agents.replay.unrolls import (
    ReplayTimeoutError,
    UnrollAdder,
    UnrollWriter,
    row_spec,
    unroll_signature,
)

__all__ = [
    "ReplayTimeoutError",
    "UnrollAdder",
    "UnrollWriter",
    "make_dataset",
    "prioritized_table",
    "queue_table",
    "row_spec",
    "unroll_signature",
]
