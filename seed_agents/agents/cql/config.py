"""Discrete CQL hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.offline import OfflineConfig


@dataclasses.dataclass(frozen=True)
class CQLConfig(OfflineConfig):
    """Conservative Q-learning for discrete actions (Kumar et al. 2020, CQL(H) on a
    double-DQN n-step target), the offline agent that improves on its data.

    CQL's own:
      cql_alpha: weight of the conservative term mean(logsumexp_a Q(o, a) - Q(o, a_data)),
        which pushes down the Q-values of actions the data did not take (0: plain
        offline double DQN, which overestimates unseen actions).
      target_update_period: learner steps between copies of the Q network into its
        target.
      huber_delta: the TD loss is Huber with this threshold.
      epsilon: the behaviour policy's (`make_policy(evaluation=False)`) share of random
        actions; evaluation acts greedily on Q.
    """

    cql_alpha: float = 1.0
    target_update_period: int = 200
    huber_delta: float = 1.0
    epsilon: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        if self.cql_alpha < 0:
            raise ValueError(f"cql_alpha must be >= 0, got {self.cql_alpha}.")
        if self.target_update_period < 1:
            raise ValueError(f"target_update_period must be >= 1, "
                             f"got {self.target_update_period}.")
        if self.huber_delta <= 0:
            raise ValueError(f"huber_delta must be > 0, got {self.huber_delta}.")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}.")
