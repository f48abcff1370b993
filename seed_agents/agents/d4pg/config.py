"""D4PG hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

from seed_agents.configs.transitions import ActorCriticConfig, check_support


@dataclasses.dataclass(frozen=True)
class D4PGConfig(ActorCriticConfig):
    """Everything the D4PG builder, learner and policy need to agree on.

    Acme's defaults where they fit two CPU cores: 5-step returns, exploration noise 0.3,
    a categorical critic of 51 atoms on [-150, 150], batches of 256. Where they differ,
    and why:
      * samples_per_insert 256 (Acme: 32): one update per env step, as SAC. Acme's ratio
        is for many actors feeding one learner over millions of steps; at 100K env steps
        on one machine it leaves the learner a few thousand updates. On walker-walk at
        100K env steps, seed 1 evaluated at 268 with half an update per step and Adam
        at 1e-4, and at 955 with these two settings (docs/continuous-control.md);
      * Adam at 3e-4 for both networks (Acme: 1e-4), SAC's step;
      * hidden sizes (256, 256) for both networks, ReLU layers (Acme: LayerNorm MLPs of
        (256, 256, 256) and (512, 512, 256); `layer_norm_mlp=True` takes its kind of
        layer): about a third of the critic's compute per update;
      * Polyak-averaged targets (tau 0.005) instead of a copy every 100 steps, the same
        target rule as SAC (`seed_agents.networks.target_updates`).
    Replay, acting and network fields are `ActorCriticConfig`'s.

    D4PG's own:
      num_atoms, v_min, v_max: the critic's support, num_atoms values evenly spaced on
        [v_min, v_max]; returns outside it are clipped onto its ends.
      sigma: standard deviation of the Gaussian exploration noise on the actions
        (clipped back into [-1, 1]); evaluation environments act without it.
    """

    n_step: int = 5
    samples_per_insert: float = 256.0
    learning_rate: float = 3e-4
    num_atoms: int = 51
    v_min: float = -150.0
    v_max: float = 150.0
    sigma: float = 0.3

    def __post_init__(self):
        super().__post_init__()
        check_support(self.num_atoms, self.v_min, self.v_max)
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {self.sigma}.")
