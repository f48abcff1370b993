"""SAC hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.agents.replay_config import (
    TransitionReplayConfig,
    check_positive,
    check_sizes,
)


@dataclasses.dataclass(frozen=True)
class SACConfig(TransitionReplayConfig):
    """Everything the SAC builder, learner and policy need to agree on.

    The defaults are the common MuJoCo ones (the SAC paper, CleanRL, Acme): two layers of
    256 for every network, Adam at 3e-4, batches of 256, Polyak averaging at 0.005, one
    update per env step, and a temperature learned towards an entropy of -dim(A). Replay
    and acting fields are `TransitionReplayConfig`'s.

    Networks and learning:
      actor_hidden_sizes, critic_hidden_sizes: ReLU MLP layers of the policy and of each
        of the two critics (a critic sees the observation and the action, concatenated).
      learning_rate: Adam's step for actor, critics and temperature alike.
      tau: Polyak averaging step of the target critics (1 copies).
      initial_temperature: alpha at the start (its log is what is learned).
      target_entropy: the policy entropy the temperature steers towards; None means
        -dim(A), the SAC paper's heuristic.
      reward_scale: rewards are multiplied by this in the critic's targets.
      max_gradient_norm: global-norm gradient clipping of each loss; None disables it.
    """

    actor_hidden_sizes: tuple[int, ...] = (256, 256)
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    learning_rate: float = 3e-4
    tau: float = 0.005
    initial_temperature: float = 1.0
    target_entropy: float | None = None
    reward_scale: float = 1.0
    max_gradient_norm: float | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "actor_hidden_sizes",
                           check_sizes(self.actor_hidden_sizes, "actor_hidden_sizes"))
        object.__setattr__(self, "critic_hidden_sizes",
                           check_sizes(self.critic_hidden_sizes, "critic_hidden_sizes"))
        check_positive(self, "learning_rate", "initial_temperature", "reward_scale")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(f"max_gradient_norm must be > 0 or None, "
                             f"got {self.max_gradient_norm}.")
