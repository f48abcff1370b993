"""Values that follow the run's progress, as functions of its env steps."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class LinearSchedule:
    """`start` at env step 0, moving linearly to `end` at `steps`, `end` from then on.

    DQN's exploration is the usual use: epsilon 1.0 -> 0.05 over the first tenth of the
    budget. A schedule is a plain function of the run's env steps (restored counts
    included), so a resumed run continues it where it was instead of starting over.
    """

    start: float
    end: float
    steps: int

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"LinearSchedule steps must be >= 0, got {self.steps}.")

    def __call__(self, env_steps: int) -> float:
        if env_steps >= self.steps:
            return self.end
        return self.start + (self.end - self.start) * max(env_steps, 0) / self.steps
