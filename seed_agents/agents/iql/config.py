"""IQL hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.offline import OfflineConfig
from seed_agents.configs.transitions import check_positive, check_sizes


@dataclasses.dataclass(frozen=True)
class IQLConfig(OfflineConfig):
    """Everything the IQL builder, learner and policy need to agree on.

    The defaults are the paper's for the D4RL locomotion tasks (Kostrikov et al. 2021,
    appendix: expectile 0.7, inverse temperature 3, Adam at 3e-4, batches of 256, two
    layers of 256, Polyak 0.005, advantage weights clipped at 100). The dataset, replay,
    MLP and optimizer fields are `OfflineConfig`'s (`hidden_sizes`: the policy's and the
    value's layers).

    IQL's own:
      critic_hidden_sizes: layers of each of the two Q(s, a) critics.
      expectile: V(s) fits this expectile of the data's Q(s, a) (0.5: their mean; towards
        1: the best of the data's actions).
      temperature: beta in the policy's weights exp(beta (Q - V)); 0 is behaviour cloning.
      max_weight: the weights are clipped here.
      tau: Polyak step of the target critics.
      init_scale, min_scale: the Gaussian policy's standard deviation at the start and
        its floor (`GaussianActor`; IQL's own policy starts at log std 0 and clips it at
        -5: 1 and exp(-5) = 0.0067).
    """

    learning_rate: float = 3e-4
    max_gradient_norm: float | None = None
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    expectile: float = 0.7
    temperature: float = 3.0
    max_weight: float = 100.0
    tau: float = 0.005
    init_scale: float = 1.0
    min_scale: float = 0.0067

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "critic_hidden_sizes",
                           check_sizes(self.critic_hidden_sizes, "critic_hidden_sizes"))
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile must be in (0, 1), got {self.expectile}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}.")
        check_positive(self, "max_weight")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")
        check_positive(self, "init_scale", "min_scale")
