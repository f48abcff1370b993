"""MPO hyperparameters, checked when built."""

from __future__ import annotations

import dataclasses
import math

from seed_agents.configs.transitions import (
    ActorCriticConfig,
    check_positive,
    check_support,
)

CRITIC_TYPES = ("nondistributional", "categorical")
"""What `MPOConfig.critic_type` takes (Acme's `CriticType` names, lower case)."""


@dataclasses.dataclass(frozen=True)
class MPOConfig(ActorCriticConfig):
    """Everything the MPO builder, learner and policy need to agree on.

    The defaults are Acme's single-process TF agent's (acme/agents/tf/mpo/agent.py and
    learning.py; the loss's options in acme/tf/losses/mpo.py; the network heads in
    examples/tf/control_suite/lp_mpo.py and acme/tf/networks/distributional.py):
      * n_step 5, discount 0.99, batches of 256, 20 sampled actions per state
        (agent.py: n_step, num_samples);
      * KL bounds epsilon 0.1 (E-step), epsilon_mean 2.5e-3, epsilon_stddev 1e-6, per
        action dimension; duals starting at log-space 10 (temperature), 10 (alpha_mean)
        and 1000 (alpha_stddev: the standard deviation barely moves at first), all
        through softplus (learning.py's default loss, losses/mpo.py);
      * Adam at 1e-4 for the policy and the critic, 1e-2 for the duals (learning.py);
      * gradients clipped at global norm 40 (learning.py's `clipping=True`; the duals'
        are not clipped);
      * target networks copied (tau 1) every 100 learner steps (agent.py:
        target_policy_update_period and target_critic_update_period, both 100);
      * the policy's standard deviation starting at 0.7 (lp_mpo.py's init_scale) and
        floored at 1e-6 (the head's min_scale).
    Where they differ, and why:
      * samples_per_insert 256 (Acme: 32), one update per env step, as SAC, TD3 and
        D4PG here: Acme's ratio is for many actors feeding one learner over millions of
        steps (see `D4PGConfig`); min_replay_size 10,000 (Acme: 1,000) as theirs too;
      * hidden sizes (256, 256) for both networks, plain ReLU layers (Acme: LayerNorm
        MLPs of (256, 256, 256) and (512, 512, 256)): every update evaluates the target
        critic at 2 x num_samples x batch_size (observation, action) pairs, which the
        smaller critic keeps affordable on a few CPU cores (`layer_norm_mlp=True` takes
        Acme's kind of layer at any sizes);
      * Acme's action penalization (MO-MPO's extra constraint on sampled actions outside
        [-1, 1]) is left out: acting clips the actions and the critic sees only clipped
        ones.
    Replay, acting and network fields are `ActorCriticConfig`'s; `learning_rate` is the
    policy's and the critic's step unless their own is set, and `tau` is applied on the
    copy period (1: a copy; a smaller tau with target_update_period 1 is Polyak
    averaging).

    MPO's own:
      epsilon: bound on KL(q || pi_target) of the E-step's non-parametric policy q;
        the temperature is learned to keep the weights this far from uniform.
      epsilon_mean, epsilon_stddev: bounds on the KL from the target policy to the
        online one with only its mean (resp. standard deviation) moved; per action
        dimension with `per_dim_constraining` (Acme's README: divide by the number of
        dimensions when tuning one without it).
      init_log_temperature, init_log_alpha_mean, init_log_alpha_stddev: the duals'
        log-space starting values (each used as softplus(x) + 1e-8).
      per_dim_constraining: one multiplier and one bound per action dimension (Acme's
        default), else one on the KL summed over dimensions, letting some dimensions
        move more at the others' expense.
      num_samples: actions drawn from the target policy per state, for the critic's
        target and for the E-step.
      policy_learning_rate, critic_learning_rate: Adam's step of each; None takes
        `learning_rate`.
      dual_learning_rate: Adam's step of the three duals.
      target_update_period: learner steps between target updates (of the policy and the
        critic together); the targets follow after steps 0, period, 2 period, ...
      init_scale, min_scale: the Gaussian policy's initial and smallest standard
        deviation (`seed_agents.networks.gaussian.GaussianActor`).
      critic_type: "nondistributional" (a value regressed on the mean over the sampled
        next actions, Acme's TF MPO) or "categorical" (DMPO, Acme's TF `dmpo` agent and
        its JAX `CriticType.CATEGORICAL`: logits over `num_atoms` returns evenly spaced on
        [v_min, v_max], trained by cross-entropy on the projection of R + D Z', Z' the
        mixture of the target critic's distributions at the sampled next actions; the
        E-step weighs by their expected values).
      num_atoms, v_min, v_max: the categorical critic's support (Acme's DMPO: 51 on
        [-150, 150], as D4PG's); unused by the nondistributional critic.
    """

    n_step: int = 5
    learning_rate: float = 1e-4
    tau: float = 1.0
    max_gradient_norm: float | None = 40.0
    epsilon: float = 0.1
    epsilon_mean: float = 2.5e-3
    epsilon_stddev: float = 1e-6
    init_log_temperature: float = 10.0
    init_log_alpha_mean: float = 10.0
    init_log_alpha_stddev: float = 1000.0
    per_dim_constraining: bool = True
    num_samples: int = 20
    policy_learning_rate: float | None = None
    critic_learning_rate: float | None = None
    dual_learning_rate: float = 1e-2
    target_update_period: int = 100
    init_scale: float = 0.7
    min_scale: float = 1e-6
    critic_type: str = "nondistributional"
    num_atoms: int = 51
    v_min: float = -150.0
    v_max: float = 150.0

    def __post_init__(self):
        super().__post_init__()
        check_positive(self, "epsilon", "epsilon_mean", "epsilon_stddev",
                       "dual_learning_rate", "init_scale")
        for name in ("policy_learning_rate", "critic_learning_rate"):
            if getattr(self, name) is not None:
                check_positive(self, name)
        for name in ("init_log_temperature", "init_log_alpha_mean", "init_log_alpha_stddev"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}.")
        if self.num_samples < 2:
            raise ValueError(f"num_samples must be >= 2, got {self.num_samples}: with one "
                             "action per state the E-step has nothing to weigh it against.")
        if self.target_update_period < 1:
            raise ValueError(f"target_update_period must be >= 1, "
                             f"got {self.target_update_period}.")
        if self.critic_type not in CRITIC_TYPES:
            raise ValueError(f"critic_type must be one of {', '.join(CRITIC_TYPES)}, "
                             f"got {self.critic_type!r}.")
        check_support(self.num_atoms, self.v_min, self.v_max)
        if self.min_scale < 0:
            raise ValueError(f"min_scale must be >= 0, got {self.min_scale}.")

    @property
    def policy_step(self) -> float:
        """Adam's step for the policy: `policy_learning_rate`, else `learning_rate`."""
        return (self.learning_rate if self.policy_learning_rate is None
                else self.policy_learning_rate)

    @property
    def critic_step(self) -> float:
        """Adam's step for the critic: `critic_learning_rate`, else `learning_rate`."""
        return (self.learning_rate if self.critic_learning_rate is None
                else self.critic_learning_rate)
