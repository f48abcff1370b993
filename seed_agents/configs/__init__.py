"""The settings agent families share, as validated dataclasses to extend.

`TransitionReplayConfig` (replay size, samples per insert, n-step, batch, evaluation
environments) for any agent on n-step transitions; `ActorCriticConfig` adds the networks
and optimizers of continuous control (SAC, D4PG); `OfflineConfig` the dataset and MLP of
offline agents (BC, CQL). `check_positive` and `check_sizes` give an agent's own fields
the same clear errors.
"""

from seed_agents.configs.offline import OfflineConfig
from seed_agents.configs.transitions import (
    ActorCriticConfig,
    TransitionReplayConfig,
    check_positive,
    check_sizes,
)

__all__ = ["ActorCriticConfig", "OfflineConfig", "TransitionReplayConfig", "check_positive",
           "check_sizes"]
