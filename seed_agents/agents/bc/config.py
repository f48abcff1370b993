"""Behaviour-cloning hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.offline import OfflineConfig


@dataclasses.dataclass(frozen=True)
class BCConfig(OfflineConfig):
    """Behaviour cloning: fit the dataset's action at each observation.

    Discrete actions: a softmax over the actions, trained with cross-entropy. Continuous
    actions: a diagonal Gaussian (mean and log standard deviation heads), trained by its
    log-likelihood of the dataset's action; not tanh-squashed, because recorded actions
    sit on the [-1, 1] bounds (clipped noise), where a tanh-Gaussian's likelihood is
    infinite. Evaluation takes the most likely action (the argmax / the mean, clipped
    to [-1, 1]); the behaviour policy (`make_policy(evaluation=False)`) samples.

    BC's own:
      min_log_std, max_log_std: the Gaussian's log standard deviation is clipped here.
    """

    min_log_std: float = -5.0
    max_log_std: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if not self.min_log_std < self.max_log_std:
            raise ValueError(f"min_log_std ({self.min_log_std}) must be below max_log_std "
                             f"({self.max_log_std}).")
