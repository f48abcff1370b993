"""Per-environment step-type order: what a stream's step batches may say, env by env.

dm_env's step types follow one order in every environment: an episode is FIRST, any
number of MIDs, then LAST, and the next episode starts with FIRST again. A stream starts
with no episode in progress. So, for each environment slot:

    start -> FIRST
    FIRST -> MID | LAST
    MID   -> MID | LAST
    LAST  -> FIRST

Anything else (MID after LAST, LAST twice, FIRST in the middle of an episode) would
store rows no learner can interpret (a reward across an episode boundary, an unroll
that bootstraps through a reset), so the inference service refuses the batch and ends
the stream. The check is one table lookup over the K slots (numpy), once per batch.
"""

from __future__ import annotations

import numpy as np

from seed_agents.inference.protocol import FIRST, LAST, MID

_START = 3  # The state of a slot before its first step.
_NAMES = {int(FIRST): "FIRST", int(MID): "MID", int(LAST): "LAST"}
_FOLLOWS = {int(FIRST): "LAST (or the start of the stream)", int(MID): "FIRST or MID",
            int(LAST): "FIRST or MID"}

# FIRST and MID allow the same successors, as do LAST and the start: a slot is either in
# an episode (its next step is MID or LAST) or between episodes (its next step is FIRST).
# So a batch is in order exactly when its FIRSTs are where a FIRST is due, and the check
# is two byte translations and a comparison (bytes.translate runs in C).
_FIRST_DUE = bytes.maketrans(bytes([FIRST, MID, LAST, _START]), bytes([0, 0, 1, 1]))
_IS_FIRST = bytes.maketrans(bytes([FIRST, MID, LAST]), bytes([1, 0, 0]))


class StepOrderError(ValueError):
    """A step batch breaks the step-type order of one of its environments."""


class StepTypeTracker:
    """The last step type of each of a stream's K environments; `check` advances it."""

    def __init__(self, num_envs: int):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self._last = bytes([_START]) * num_envs
        self._first_due = self._last.translate(_FIRST_DUE)

    def check(self, step_type: np.ndarray) -> None:
        """Accepts the batch's step types (uint8 [K], each 0, 1 or 2, as the wire
        decoder guarantees) or raises `StepOrderError` naming the first environment out
        of order; only an accepted batch advances the state."""
        current = step_type.tobytes()
        if current.translate(_IS_FIRST) != self._first_due:
            self._raise(current)
        self._last = current
        self._first_due = current.translate(_FIRST_DUE)

    def _raise(self, current: bytes) -> None:
        if len(current) != len(self._last):
            raise ValueError(f"expected {len(self._last)} step types, got {len(current)}")
        i = next(i for i, (a, b) in enumerate(zip(current.translate(_IS_FIRST),
                                                  self._first_due, strict=True)) if a != b)
        previous, now = self._last[i], current[i]
        if previous == _START:
            raise StepOrderError(
                f"environment {i}: the first step batch of a stream must have every "
                f"step_type FIRST (a new stream has no episode in progress), got "
                f"{_NAMES.get(now, now)}"
            )
        raise StepOrderError(
            f"environment {i}: step_type {_NAMES.get(now, now)} after {_NAMES[previous]} "
            f"({_NAMES.get(now, now)} must follow {_FOLLOWS.get(now, 'nothing')})"
        )
