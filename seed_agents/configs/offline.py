"""The settings every offline agent has: how the dataset becomes replay, and the MLP and
optimizer its learner trains (`BCConfig` and `CQLConfig` extend them)."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.transitions import check_positive, check_sizes


@dataclasses.dataclass(frozen=True)
class OfflineConfig:
    """Fields of every agent that learns from a recorded dataset.

    Replay (the dataset's episodes through an `NStepTransitionAdder`, into a uniform
    table that never removes; see `seed_agents.datasets.replay`):
      n_step: steps summed into each transition's reward.
      discount: gamma.
      batch_size: transitions per learner step.
      replay_size: most transitions the table holds: the whole dataset must fit (a
        larger one is refused, naming this field).
      prefetch: batches the dataset prepares ahead of the learner.

    Learning:
      hidden_sizes: ReLU MLP layers on the (flattened) observation.
      learning_rate: Adam's step.
      max_gradient_norm: global-norm gradient clipping; None disables it.
    """

    n_step: int = 1
    discount: float = 0.99
    batch_size: int = 256
    replay_size: int = 2_000_000
    prefetch: int = 2
    hidden_sizes: tuple[int, ...] = (256, 256)
    learning_rate: float = 1e-3
    max_gradient_norm: float | None = 10.0

    def __post_init__(self):
        for name in ("n_step", "batch_size", "replay_size", "prefetch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {self.discount}.")
        object.__setattr__(self, "hidden_sizes", check_sizes(self.hidden_sizes,
                                                             "hidden_sizes"))
        check_positive(self, "learning_rate")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(f"max_gradient_norm must be > 0 or None, "
                             f"got {self.max_gradient_norm}.")
