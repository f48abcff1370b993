"""Reverb tables, unroll and n-step transition assembly and writing, and datasets that
read items back."""

from seed_agents.replay.dataset import make_dataset
from seed_agents.replay.tables import (
    offline_table,
    prioritized_table,
    queue_table,
    rate_limited_table,
)
from seed_agents.replay.transitions import NStepTransitionAdder, transition_signature
from seed_agents.replay.unrolls import (
    ReplayTimeoutError,
    UnrollAdder,
    UnrollWriter,
    row_spec,
    unroll_signature,
)

__all__ = [
    "NStepTransitionAdder",
    "ReplayTimeoutError",
    "UnrollAdder",
    "UnrollWriter",
    "make_dataset",
    "offline_table",
    "prioritized_table",
    "queue_table",
    "rate_limited_table",
    "row_spec",
    "transition_signature",
    "unroll_signature",
]
