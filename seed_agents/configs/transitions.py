"""The settings every n-step transition agent has, checked in one place: replay and
acting (`TransitionReplayConfig`), and the actor-critic fields SAC and D4PG share
(`ActorCriticConfig`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TransitionReplayConfig:
    """Replay and acting fields shared by SAC and D4PG (their configs extend it).

    Replay (Acme's arrangement, see `seed_agents.replay.rate_limited_table`):
      n_step: steps summed into each transition's reward (1: plain one-step TD).
      discount: gamma.
      batch_size: transitions per learner step.
      samples_per_insert: transitions sampled per transition inserted; with batch B the
        learner takes samples_per_insert / B steps per env step (256 / 256: one update
        per env step, SAC's usual ratio).
      samples_per_insert_tolerance_rate: how far the ratio may drift before the faster
        side blocks, as a share of the samples the first `min_replay_size` inserts allow
        (Acme's error buffer: min_replay_size * samples_per_insert * rate).
      min_replay_size: transitions stored before the learner samples; acting before that
        is the policy's untrained, high-entropy behaviour.
      replay_size: most transitions stored; the oldest leave first.
      prefetch: batches the dataset prepares ahead of the learner.

    Acting:
      num_eval_envs: environments (the first ids) that act deterministically (the mean
        action) instead of exploring, as SEED's evaluation environments: their experience
        stays out of replay and their returns are reported on their own.
    """

    n_step: int = 1
    discount: float = 0.99
    batch_size: int = 256
    samples_per_insert: float = 256.0
    samples_per_insert_tolerance_rate: float = 0.1
    min_replay_size: int = 10_000
    replay_size: int = 1_000_000
    prefetch: int = 2
    num_eval_envs: int = 1

    def __post_init__(self):
        for name in ("n_step", "batch_size", "min_replay_size", "replay_size", "prefetch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_eval_envs < 0:
            raise ValueError(f"num_eval_envs must be >= 0, got {self.num_eval_envs}.")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {self.discount}.")
        if self.samples_per_insert <= 0 or self.samples_per_insert_tolerance_rate <= 0:
            raise ValueError("samples_per_insert and samples_per_insert_tolerance_rate "
                             "must be > 0.")
        if self.min_replay_size > self.replay_size:
            raise ValueError(f"min_replay_size ({self.min_replay_size}) must be <= "
                             f"replay_size ({self.replay_size}).")
        if self.min_replay_size < self.batch_size:
            raise ValueError(f"min_replay_size ({self.min_replay_size}) must be >= "
                             f"batch_size ({self.batch_size}): the first batch is drawn "
                             "from what the table holds when sampling starts.")

    @property
    def error_buffer(self) -> float:
        """The rate limiter's error buffer, in sampled items (at least one insert's)."""
        return max(self.min_replay_size * self.samples_per_insert
                   * self.samples_per_insert_tolerance_rate, self.samples_per_insert, 1.0)


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig(TransitionReplayConfig):
    """An actor, critics on (observation, action), Adam, Polyak-averaged targets.

    Fields:
      actor_hidden_sizes, critic_hidden_sizes: ReLU MLP layers of the policy and of each
        critic (a critic sees the observation and the action, concatenated).
      layer_norm_mlp: every network's hidden layers are Acme's `LayerNormMLP` instead (the
        first linear, then LayerNorm and tanh; ELU after; `seed_agents.networks.mlp.mlp`),
        as Acme's control networks have them; False: ReLU layers.
      learning_rate: Adam's step for every network.
      tau: Polyak averaging step of the target networks (1 copies).
      max_gradient_norm: global-norm gradient clipping of each loss; None disables it.
    """

    actor_hidden_sizes: tuple[int, ...] = (256, 256)
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    layer_norm_mlp: bool = False
    learning_rate: float = 3e-4
    tau: float = 0.005
    max_gradient_norm: float | None = None

    def __post_init__(self):
        super().__post_init__()
        for name in ("actor_hidden_sizes", "critic_hidden_sizes"):
            object.__setattr__(self, name, check_sizes(getattr(self, name), name))
        check_positive(self, "learning_rate")
        if not isinstance(self.layer_norm_mlp, bool):
            raise ValueError(f"layer_norm_mlp must be True or False, got "
                             f"{self.layer_norm_mlp!r}.")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}.")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(f"max_gradient_norm must be > 0 or None, "
                             f"got {self.max_gradient_norm}.")


def check_positive(config: object, *names: str) -> None:
    """Raises ValueError naming the first of `names` that is not > 0 on `config`."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}.")


def check_support(num_atoms: int, v_min: float, v_max: float) -> None:
    """Raises ValueError unless a categorical critic's support is `num_atoms` >= 2 returns
    on [v_min, v_max] with v_min < v_max (D4PG's, DMPO's and `CategoricalCritic`'s)."""
    if num_atoms < 2 or not v_min < v_max:
        raise ValueError(f"a categorical support needs num_atoms >= 2 and v_min < v_max, "
                         f"got {num_atoms} atoms on [{v_min}, {v_max}].")


def check_sizes(sizes: object, name: str) -> tuple[int, ...]:
    """`sizes` (an int or a sequence) as a tuple of positive layer sizes."""
    sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
    if not sizes or any(int(h) < 1 for h in sizes):
        raise ValueError(f"{name} must be positive layer sizes, got {sizes}.")
    return tuple(int(h) for h in sizes)
