"""R2D2 hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class R2D2Config:
    """Everything the R2D2 builder, learner and policy need to agree on.

    The defaults are sized for small vector tasks on a few CPU cores (CartPole, with or
    without velocities); the paper's Atari values are noted where they differ.

    Sequences and targets:
      burn_in: steps at the start of each sequence that only warm up the LSTM state from
        the stored start state, without gradient (paper: 40).
      trace_length: steps after the burn-in that are trained on (paper: 80).
      sequence_period: a new sequence starts every this many steps, so consecutive
        sequences overlap by burn_in + trace_length + 1 - period rows (paper: 40).
      n_step: length of the n-step double-Q return, truncated at episode ends and at the
        end of a sequence (paper: 5).
      discount: gamma (paper: 0.997).
      value_rescaling_epsilon: epsilon of h(x) = sign(x)(sqrt(|x|+1)-1) + epsilon*x.
      reward_clip: rewards are clipped to [-reward_clip, reward_clip] by the learner; None
        leaves them raw (the paper rescales values instead of clipping).

    Learning:
      learning_rate, adam_epsilon: Adam (paper: 1e-4 and 1e-3).
      batch_size: sequences per learner step (paper: 64).
      target_update_period: learner steps between copies of the online network into the
        target network (paper: 2500).
      max_gradient_norm: global-norm gradient clipping; None disables it.

    Replay:
      replay_size: most sequences the prioritized table holds; the oldest go first (FIFO).
      min_replay_size: sequences in the table before the learner samples.
      samples_per_insert: sequences sampled per sequence inserted, held by Reverb's rate
        limiter: the faster side (acting or learning) waits for the other.
      priority_exponent: alpha of prioritized sampling, P(i) ~ p_i^alpha (paper: 0.9).
      importance_sampling_exponent: beta of the importance weights (N P(i))^-beta,
        normalized by their batch maximum (paper: 0.6).
      priority_eta: a sequence's priority is eta * max|td| + (1 - eta) * mean|td|.
      prefetch: batches the dataset prepares ahead of the learner.

    Acting:
      epsilon_base, epsilon_alpha: Ape-X's per-environment exploration; training
        environment i of N acts epsilon-greedily with epsilon_base^(1 + alpha i/(N-1)).
      num_eval_envs: environments (the first ids) that act with `eval_epsilon` instead,
        as SEED's evaluation environments: their experience stays out of replay and their
        returns are reported, and judged against a target return, on their own.
      eval_epsilon: the evaluation environments' (and the evaluator's) epsilon.

    Network:
      torso: a name in `seed_agents.networks.torsos.TORSOS`: "mlp", or "nature_cnn" or
        "impala_resnet" (convolutions before the MLP layers, for 84x84 pixels), or
        "minatar" (one 3x3x16 convolution, for MinAtar's 10x10xC planes).
      hidden_sizes: MLP torso layers.
      lstm_size: the LSTM core's units; its input also gets the previous action.
      head_hidden_size: hidden units of each dueling stream (value and advantage).
      precision: "float32"; "bfloat16" computes the torso in bfloat16 (variables, core,
        heads and losses stay float32; see `seed_agents.networks.torsos.PRECISIONS`): ~40%
        less CPU per frame for a pixel torso on hardware with native bfloat16, ~8x more
        where it is emulated (it runs, with a warning); "auto" picks bfloat16 only where
        it is native (`seed_agents.utils.hardware`), where the network is built.
    """

    burn_in: int = 8
    trace_length: int = 40
    sequence_period: int = 20
    n_step: int = 5
    discount: float = 0.99
    value_rescaling_epsilon: float = 1e-3
    reward_clip: float | None = None
    learning_rate: float = 1e-3
    adam_epsilon: float = 1e-3
    batch_size: int = 32
    target_update_period: int = 100
    max_gradient_norm: float | None = 40.0
    replay_size: int = 5_000
    min_replay_size: int = 200
    samples_per_insert: float = 8.0
    priority_exponent: float = 0.9
    importance_sampling_exponent: float = 0.6
    priority_eta: float = 0.9
    prefetch: int = 1
    epsilon_base: float = 0.4
    epsilon_alpha: float = 7.0
    num_eval_envs: int = 8
    eval_epsilon: float = 0.0
    torso: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64,)
    lstm_size: int = 64
    head_hidden_size: int = 64
    precision: str = "float32"

    def __post_init__(self):
        positive = ("trace_length", "sequence_period", "n_step", "batch_size",
                    "target_update_period", "replay_size", "min_replay_size", "lstm_size",
                    "prefetch")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("burn_in", "num_eval_envs", "head_hidden_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.sequence_period > self.unroll_length:
            raise ValueError(
                f"sequence_period must be <= burn_in + trace_length = {self.unroll_length}, "
                f"got {self.sequence_period}: sequences would skip steps."
            )
        if self.min_replay_size > self.replay_size:
            raise ValueError(
                f"min_replay_size ({self.min_replay_size}) must be <= replay_size "
                f"({self.replay_size})."
            )
        for name in ("discount", "priority_eta", "importance_sampling_exponent",
                     "epsilon_base", "eval_epsilon"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")
        for name in ("learning_rate", "adam_epsilon", "samples_per_insert"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
        for name in ("value_rescaling_epsilon", "priority_exponent", "epsilon_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.reward_clip is not None and self.reward_clip <= 0:
            raise ValueError(f"reward_clip must be > 0 or None, got {self.reward_clip}.")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(
                f"max_gradient_norm must be > 0 or None, got {self.max_gradient_norm}."
            )
        sizes = self.hidden_sizes
        sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
        if any(h < 1 for h in sizes):
            raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}.")
        object.__setattr__(self, "hidden_sizes", sizes)
        # Deferred: the torso table loads TensorFlow, which importing a config should not.
        from seed_agents.networks.torsos import check_torso
        from seed_agents.utils.hardware import check_precision

        check_torso(self.torso)
        check_precision(self.precision)

    @property
    def unroll_length(self) -> int:
        """T: each sequence holds T+1 rows, burn-in and trace plus one to bootstrap from."""
        return self.burn_in + self.trace_length
