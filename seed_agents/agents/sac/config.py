"""SAC hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.transitions import ActorCriticConfig, check_positive


@dataclasses.dataclass(frozen=True)
class SACConfig(ActorCriticConfig):
    """Everything the SAC builder, learner and policy need to agree on.

    The defaults are the common MuJoCo ones (the SAC paper, CleanRL, Acme): two layers of
    256 for every network, Adam at 3e-4, batches of 256, Polyak averaging at 0.005, one
    update per env step, and a temperature learned towards an entropy of -dim(A). Replay,
    acting and network fields are `ActorCriticConfig`'s (two critics here).

    SAC's own:
      initial_temperature: alpha at the start (its log is what is learned).
      target_entropy: the policy entropy the temperature steers towards; None means
        -dim(A), the SAC paper's heuristic.
      reward_scale: rewards are multiplied by this in the critics' targets.
    """

    initial_temperature: float = 1.0
    target_entropy: float | None = None
    reward_scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        check_positive(self, "initial_temperature", "reward_scale")
