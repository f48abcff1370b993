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

# _ALLOWED[previous, current]: whether `current` may follow `previous` in one slot.
_ALLOWED = np.zeros((4, 3), bool)
_ALLOWED[[LAST, _START], FIRST] = True
_ALLOWED[[FIRST, MID], MID] = True
_ALLOWED[[FIRST, MID], LAST] = True
_ALLOWED.flags.writeable = False


class StepOrderError(ValueError):
    """A step batch breaks the step-type order of one of its environments."""


class StepTypeTracker:
    """The last step type of each of a stream's K environments; `check` advances it."""

    def __init__(self, num_envs: int):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self._last = np.full(num_envs, _START, np.uint8)

    def check(self, step_type: np.ndarray) -> None:
        """Accepts the batch's step types (uint8 [K], each 0, 1 or 2) or raises
        `StepOrderError` naming the first environment out of order; only an accepted
        batch advances the state."""
        allowed = _ALLOWED[self._last, step_type]
        if not allowed.all():
            i = int(np.argmin(allowed))
            previous, current = int(self._last[i]), int(step_type[i])
            if previous == _START:
                raise StepOrderError(
                    f"environment {i}: the first step batch of a stream must have every "
                    f"step_type FIRST (a new stream has no episode in progress), got "
                    f"{_NAMES[current]}"
                )
            raise StepOrderError(
                f"environment {i}: step_type {_NAMES[current]} after {_NAMES[previous]} "
                f"({_NAMES[current]} must follow {_FOLLOWS[current]})"
            )
        self._last[:] = step_type
