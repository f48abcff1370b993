"""V-trace (IMPALA) hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses

VALUE_NORMALIZATIONS = (None, "running", "popart")
"""The choices of `VTraceConfig.value_normalization`."""

PPO_PROXIMAL_POLICIES = ("behaviour", "batch_start")
"""The choices of `VTraceConfig.ppo_proximal`: the policy PPO's clip keeps the learner near."""


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
      torso: a name in `seed_agents.networks.torsos.TORSOS`: "mlp", "nature_cnn" (the Nature
        DQN convolutions before the MLP layers, for 84x84 pixel observations; use e.g.
        hidden_sizes=(512,)) or "impala_resnet" (IMPALA's deep residual torso, ~7x the
        Nature CNN's compute per frame; the paper puts hidden_sizes=(256,) after it) or
        "minatar" (the MinAtar paper's one 3x3 convolution of 16 channels, for 10x10xC
        planes; hidden_sizes=(128,) after it as in the paper).
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
      ppo_proximal: the policy PPO's clip is measured from. "behaviour" (APPO as in
        Sample Factory): ratios pi/mu to the policy that acted, so a batch that waited in
        the queue while the learner moved on starts partly clipped, and the more the lag,
        the less of it can still move the policy. "batch_start": the learner's own policy
        when the batch arrived (pi_prox, one extra forward pass over the batch), the
        decoupled objective of Hilton et al. 2022 ("Batch size-invariance for policy
        optimization"): ratios pi/pi_prox, each sample weighed by min(pi_prox/mu,
        clip_pg_rho_threshold) for the lag, so each learner step may move the policy by
        the clip whatever the lag; the adaptive learning rate then reads this step's own
        move, `step_kl` = KL(pi_prox || pi), rather than `kl` from mu. With no lag the two
        are the same objective.
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
        stay there (PPO's and APPO's Atari schedules); None keeps both constant (unless
        `anneal_over_budget`). With `kl_target` it is the learning rate's cap that moves.
      final_learning_rate_fraction: the learning rate at `anneal_steps`, as a fraction of
        `learning_rate` (0: annealed to zero, as CleanRL's PPO does over its budget).
      final_entropy_fraction: the entropy cost at `anneal_steps`, as a fraction of
        `entropy_cost` (1: not annealed).
      anneal_over_budget: with `anneal_steps` None, the schedule ends with the run's step
        budget, whatever it is: `for_budget`, which `train` and the benchmarks call with
        the budget, sets `anneal_steps` (a preset cannot know the budget).
      precision: "float32"; "bfloat16" computes the torso in bfloat16 (variables, core,
        heads and losses stay float32; see `seed_agents.networks.torsos.PRECISIONS`): ~40%
        less CPU per frame for a pixel torso on hardware with native bfloat16, ~8x more
        where it is emulated (it runs, with a warning); "auto" picks bfloat16 only where
        it is native (`seed_agents.utils.hardware`), where the network is built.
      value_normalization: None, "running" or "popart". When set, the value head predicts
        the value normalized by running statistics (mean, std) of the V-trace targets
        `vs`, and the baseline loss is 0.5 * ((vs - mean) / std - head)^2: its scale, and
        so its share of the gradient against the policy's, no longer depends on the
        reward scale of the task. V-trace itself reads the unnormalized value
        mean + std * head. "running" is rl_games' `normalize_value`: the statistics just
        move, and what a head output means moves with them. "popart" (van Hasselt et
        al. 2016; Hessel et al. 2019 for IMPALA) also rescales the value head's weights
        at every statistics update so that the unnormalized value stays exactly what it
        was (Preserving Outputs Precisely): learning the scale never perturbs the values.
        The statistics belong to the learner (see `VTraceLearner`).
      value_normalization_decay: the statistics are an exponential moving average with
        this decay per learner step (~1 / (1 - decay) steps of memory), after a warm-up
        that averages the first batches equally (see `ValueNormalizer`).
      kl_target: when set, the learning rate adapts to the KL divergence between the
        behaviour policy mu and the learner's policy pi (rl_games' `lr_schedule:
        adaptive`): after each learner step, KL above 2 * kl_target divides it by
        `kl_adapt_factor`, KL below kl_target / 2 multiplies it, within
        [min_learning_rate, max_learning_rate]. With a schedule (`anneal_steps`,
        `anneal_over_budget`) the schedule anneals the cap instead of the rate: from
        `max_learning_rate` to its `final_learning_rate_fraction`, the rate brought down
        to the cap whenever it is above (logged as `learning_rate_cap`), so that the KL
        brakes early and the schedule calms the end of a run. `learning_rate` is where it
        starts.
      min_learning_rate, max_learning_rate: the bounds of the adaptive learning rate.
      torso_learning_rate_scale: the torso's (convolutions, MLP layers, a value torso)
        step size as a fraction of the learning rate, whatever sets that (fixed, annealed
        or adapted to the KL); the heads and an LSTM core take the full rate. Below 1 it
        lets the heads, which cannot die, move fast while the torso's ReLUs are kept from
        full-size Adam steps on noisy advantages (what killed BattleZone's features at a
        1e-3 rate, see `presets.ATARI_PPO`). Each part then has an Adam of its own.
      kl_adapt_factor: the factor (> 1) of one adaptive learning rate change.
      num_minibatches: each batch of `batch_size` unrolls is split into this many
        minibatches of whole unrolls (V-trace needs an unroll's every row), and each of
        the `sgd_steps_per_batch` epochs takes one gradient step per minibatch, as PPO
        does: a learner step then takes sgd_steps_per_batch * num_minibatches gradient
        steps, each on batch_size / num_minibatches unrolls. It must divide batch_size.
      observation_normalization: the network standardizes vector observations by the
        running mean and variance of every observation the learner has trained on
        (rl_games' `normalize_input`, SB3's `VecNormalize`), updated after each learner
        step; statistics are network variables, so the policy acts with them. For the
        "mlp" torso only: pixels are already scaled to [0, 1].
      observation_clip: standardized observations are clipped to [-clip, clip].
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
    ppo_proximal: str = "behaviour"
    sgd_steps_per_batch: int = 4
    normalize_advantages: bool = False
    anneal_steps: int | None = None
    final_learning_rate_fraction: float = 0.0
    final_entropy_fraction: float = 1.0
    anneal_over_budget: bool = False
    precision: str = "float32"
    value_normalization: str | None = None
    value_normalization_decay: float = 0.99
    kl_target: float | None = None
    min_learning_rate: float = 1e-6
    max_learning_rate: float = 1e-2
    kl_adapt_factor: float = 1.5
    torso_learning_rate_scale: float = 1.0
    num_minibatches: int = 1
    observation_normalization: bool = False
    observation_clip: float = 5.0

    @property
    def samples_per_learner_step(self) -> int:
        """Agent steps each learner step consumes: `batch_size` unrolls of `unroll_length`
        (each unroll is sampled once from the queue)."""
        return self.batch_size * self.unroll_length

    @property
    def gradient_steps_per_learner_step(self) -> int:
        """Gradient steps each learner step takes: one per minibatch per epoch
        (`sgd_steps_per_batch * num_minibatches`). Per agent step that is this over
        `samples_per_learner_step`, the figure to compare with PPO's (4 epochs x 4
        minibatches on 1,024 samples: 16 per 1,024)."""
        return self.sgd_steps_per_batch * self.num_minibatches

    def for_budget(self, env_steps: int) -> VTraceConfig:
        """This config for a run of `env_steps` agent steps: with `anneal_over_budget`
        and no `anneal_steps`, the schedule ends with the budget (each learner step
        consumes `batch_size * unroll_length` agent steps)."""
        if self.anneal_steps is not None or not self.anneal_over_budget:
            return self
        steps = max(1, env_steps // self.samples_per_learner_step)
        return dataclasses.replace(self, anneal_steps=steps)

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
        if self.ppo_proximal not in PPO_PROXIMAL_POLICIES:
            raise ValueError(f"ppo_proximal must be one of {PPO_PROXIMAL_POLICIES}, got "
                             f"{self.ppo_proximal!r}.")
        if self.ppo_proximal != "behaviour" and self.ppo_clip is None:
            raise ValueError(f"ppo_proximal={self.ppo_proximal!r} measures PPO's clip from "
                             "another policy, and ppo_clip is None (no clip): set ppo_clip.")
        if not 0.0 < self.adam_beta2 < 1.0:
            raise ValueError(f"adam_beta2 must be in (0, 1), got {self.adam_beta2}.")
        if self.sgd_steps_per_batch < 1:
            raise ValueError(f"sgd_steps_per_batch must be >= 1, got {self.sgd_steps_per_batch}.")
        if self.anneal_steps is not None and self.anneal_steps < 1:
            raise ValueError(f"anneal_steps must be >= 1 or None, got {self.anneal_steps}.")
        for name in ("final_learning_rate_fraction", "final_entropy_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")
        if self.value_normalization not in VALUE_NORMALIZATIONS:
            raise ValueError(f"value_normalization must be one of {VALUE_NORMALIZATIONS}, "
                             f"got {self.value_normalization!r}.")
        if not 0.0 < self.value_normalization_decay < 1.0:
            raise ValueError("value_normalization_decay must be in (0, 1), got "
                             f"{self.value_normalization_decay}.")
        if self.kl_target is not None and self.kl_target <= 0:
            raise ValueError(f"kl_target must be > 0 or None, got {self.kl_target}.")
        if not 0.0 < self.min_learning_rate <= self.max_learning_rate:
            raise ValueError(
                f"min_learning_rate ({self.min_learning_rate}) must be > 0 and <= "
                f"max_learning_rate ({self.max_learning_rate}).")
        if (self.kl_target is not None
                and not self.min_learning_rate <= self.learning_rate <= self.max_learning_rate):
            raise ValueError(
                f"learning_rate ({self.learning_rate}) must be within [min_learning_rate, "
                f"max_learning_rate] ([{self.min_learning_rate}, {self.max_learning_rate}]) "
                "when kl_target adapts it: that is where it starts.")
        if self.observation_normalization and self.torso != "mlp":
            raise ValueError(
                f"observation_normalization is for vector observations (torso='mlp'), not "
                f"torso={self.torso!r}: pixels are already scaled to [0, 1] where read.")
        if self.observation_clip <= 0:
            raise ValueError(f"observation_clip must be > 0, got {self.observation_clip}.")
        if not self.torso_learning_rate_scale > 0:
            raise ValueError("torso_learning_rate_scale must be > 0, got "
                             f"{self.torso_learning_rate_scale}.")
        if self.kl_adapt_factor <= 1.0:
            raise ValueError(f"kl_adapt_factor must be > 1, got {self.kl_adapt_factor}.")
        if self.num_minibatches < 1 or self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must be >= 1 and divide "
                f"batch_size ({self.batch_size}): minibatches are whole unrolls, all of "
                "one size.")
        # Deferred: the torso table loads TensorFlow, which importing a config should not.
        from seed_agents.networks.torsos import check_torso
        from seed_agents.utils.hardware import check_precision

        check_torso(self.torso)
        check_precision(self.precision)
        if self.lstm_size is not None and self.lstm_size < 1:
            raise ValueError(f"lstm_size must be >= 1, got {self.lstm_size}.")
