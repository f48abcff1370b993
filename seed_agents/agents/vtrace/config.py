"""V-trace (IMPALA) hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class VTraceConfig:
    """Everything the V-trace builder, learner and policy need to agree on.

    The defaults are the APPO flavour (V-trace targets, PPO's clipped policy objective,
    4 gradient steps per batch, separate value torso), which solved CartPole-v1 in 3 of 3
    seeds here where plain IMPALA collapsed in most; IMPALA as in the paper is
    `ppo_clip=None, sgd_steps_per_batch=1, separate_value_torso=False`.

    Attributes:
      learning_rate: Adam step size.
      discount: gamma.
      unroll_length: T; each unroll stores T+1 rows (one overlaps with the next unroll).
      batch_size: unrolls per learner step.
      entropy_cost, baseline_cost: weights of the entropy and value losses.
      max_gradient_norm: global-norm gradient clipping; None disables it.
      clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold: V-trace's truncation
        levels (rho-bar for the targets, for the policy gradient, and c-bar).
      vtrace_lambda: the trace decay of V-trace's c_t (1.0 in the paper); lower values
        trade bias for variance like GAE's lambda.
      reward_clip: rewards are clipped to [-reward_clip, reward_clip] by the learner (the
        environment reports raw returns); None disables it.
      queue_size: unrolls the FIFO replay holds. Writers block when it is full, so it
        bounds the policy lag of the data; it must hold at least two batches so that one
        batch can fill while the learner trains on the other.
      hidden_sizes: MLP torso layers.
      torso: a name in `seed_agents.agents.torsos.TORSOS`: "mlp", "nature_cnn" (the Nature
        DQN convolutions before the MLP layers, for 84x84 pixel observations; use e.g.
        hidden_sizes=(512,)) or "impala_resnet" (IMPALA's deep residual torso, ~7x the
        Nature CNN's compute per frame; the paper puts hidden_sizes=(256,) after it).
      lstm_size: adds an LSTM core of that size when set (recurrent agent).
      separate_value_torso: gives the value head an MLP torso of its own, so value errors,
        which scale with the returns, do not swamp the policy's features. Feed-forward
        networks only: with an LSTM core both heads read the core's output.
      adam_epsilon: Adam's epsilon.
      adam_beta2: Adam's second-moment decay. When an agent that had mastered a task
        starts to fail, gradients jump by orders of magnitude; with the usual 0.999 the
        second moment lags ~1000 steps behind while the first moment follows in ~10, and
        the steps grow tens of times larger than `learning_rate`, enough to collapse the
        policy. 0.99 catches up within ~100 steps.
      prefetch: batches the dataset prepares ahead of the learner.
      ppo_clip: when set, the policy loss is PPO's clipped surrogate over the ratios
        pi/mu with V-trace advantages (APPO, as in Sample Factory) instead of IMPALA's
        policy gradient; it bounds how far one batch moves the policy.
      sgd_steps_per_batch: gradient steps taken on each sampled batch. Every unroll is
        sampled once from the queue; reusing a batch for a few steps trades a little
        off-policyness (which V-trace corrects) for sample efficiency.
      normalize_advantages: the policy loss's advantages are shifted and scaled to zero
        mean and unit deviation over each batch's valid rows, as PPO implementations do.
        With sparse clipped rewards (Atari) most advantages are tiny; normalized, the
        policy gradient keeps its scale against the entropy term whatever the game's
        reward density.
      anneal_steps: learner steps over which the learning rate and the entropy cost move
        linearly from `learning_rate` and `entropy_cost` to their final fractions, then
        stay there (PPO's and APPO's Atari schedules); None keeps both constant.
      final_learning_rate_fraction: the learning rate at `anneal_steps`, as a fraction of
        `learning_rate` (0: annealed to zero, as CleanRL's PPO does over its budget).
      final_entropy_fraction: the entropy cost at `anneal_steps`, as a fraction of
        `entropy_cost` (1: not annealed).
      precision: "float32"; "bfloat16" computes the torso in bfloat16 (variables, core,
        heads and losses stay float32; see `seed_agents.agents.torsos.PRECISIONS`): ~40%
        less CPU per frame for a pixel torso on hardware with native bfloat16, ~8x more
        where it is emulated (it runs, with a warning); "auto" picks bfloat16 only where
        it is native (`seed_agents.utils.hardware`), where the network is built.
    """

    learning_rate: float = 1e-3
    discount: float = 0.99
    unroll_length: int = 20
    batch_size: int = 16
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    max_gradient_norm: float | None = 40.0
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    clip_c_threshold: float = 1.0
    vtrace_lambda: float = 1.0
    reward_clip: float | None = None
    queue_size: int = 64
    hidden_sizes: tuple[int, ...] = (64, 64)
    torso: str = "mlp"
    lstm_size: int | None = None
    separate_value_torso: bool = True
    adam_epsilon: float = 1e-7
    adam_beta2: float = 0.999
    prefetch: int = 1
    ppo_clip: float | None = 0.2
    sgd_steps_per_batch: int = 4
    normalize_advantages: bool = False
    anneal_steps: int | None = None
    final_learning_rate_fraction: float = 0.0
    final_entropy_fraction: float = 1.0
    precision: str = "float32"

    def __post_init__(self):
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {self.discount}.")
        if self.unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {self.unroll_length}.")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}.")
        if self.queue_size < 2 * self.batch_size:
            raise ValueError(
                f"queue_size ({self.queue_size}) must be >= 2 * batch_size "
                f"({self.batch_size}): with less, acting stalls while the learner trains."
            )
        if not 0.0 <= self.vtrace_lambda <= 1.0:
            raise ValueError(f"vtrace_lambda must be in [0, 1], got {self.vtrace_lambda}.")
        if self.max_gradient_norm is not None and self.max_gradient_norm <= 0:
            raise ValueError(f"max_gradient_norm must be > 0, got {self.max_gradient_norm}.")
        if self.reward_clip is not None and self.reward_clip <= 0:
            raise ValueError(f"reward_clip must be > 0, got {self.reward_clip}.")
        if self.entropy_cost < 0 or self.baseline_cost < 0:
            raise ValueError("entropy_cost and baseline_cost must be >= 0.")
        if not self.hidden_sizes or any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}.")
        if self.ppo_clip is not None and not 0.0 < self.ppo_clip < 1.0:
            raise ValueError(f"ppo_clip must be in (0, 1), got {self.ppo_clip}.")
        if not 0.0 < self.adam_beta2 < 1.0:
            raise ValueError(f"adam_beta2 must be in (0, 1), got {self.adam_beta2}.")
        if self.sgd_steps_per_batch < 1:
            raise ValueError(f"sgd_steps_per_batch must be >= 1, got {self.sgd_steps_per_batch}.")
        if self.anneal_steps is not None and self.anneal_steps < 1:
            raise ValueError(f"anneal_steps must be >= 1 or None, got {self.anneal_steps}.")
        for name in ("final_learning_rate_fraction", "final_entropy_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")
        # Deferred: the torso table loads TensorFlow, which importing a config should not.
        from seed_agents.agents.torsos import check_torso
        from seed_agents.utils.hardware import check_precision

        check_torso(self.torso)
        check_precision(self.precision)
        if self.lstm_size is not None and self.lstm_size < 1:
            raise ValueError(f"lstm_size must be >= 1, got {self.lstm_size}.")
