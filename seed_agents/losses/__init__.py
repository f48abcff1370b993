"""Targets and losses, as functions of tensors (no networks, no state).

Q-learning: `double_q_targets` over a batch of n-step transitions and `huber_td_loss`
(DQN, discrete CQL); `n_step_double_q_targets` with `rescale` over sequences (R2D2).
Policy gradients over time-major [T, B] unrolls: `vtrace_returns` (IMPALA's off-policy
corrected targets and advantages), `policy_gradient_loss`, `clipped_surrogate_loss`
(PPO's clip), `baseline_loss`, `entropy_loss`, `kl_divergence`, each a masked mean.
Deterministic-policy actor-critics (TD3): `smoothed_target_action`,
`clipped_double_q_target`, `critic_regression`, `dpg_loss`, and `td3_bc_actor_loss` for
offline data. MPO: `mpo_temperature_and_weights` (the E-step), `gaussian_kl` and
`mpo_policy_loss` (the decoupled M-step with its multipliers). Categorical critics (D4PG,
distributional MPO): `categorical_projection`, `mixture_and_means`, `expected_value`,
`categorical_cross_entropy`. From a fixed dataset:
`gaussian_log_likelihood` (behaviour cloning), `expectile_loss` and `advantage_weights`
(implicit Q-learning).
"""

from seed_agents.losses.deterministic import (
    clipped_double_q_target,
    critic_regression,
    dpg_loss,
    smoothed_target_action,
    td3_bc_actor_loss,
)
from seed_agents.losses.distributional import (
    categorical_cross_entropy,
    categorical_projection,
    expected_value,
    mixture_and_means,
)
from seed_agents.losses.mpo import gaussian_kl, mpo_policy_loss, mpo_temperature_and_weights
from seed_agents.losses.offline import (
    advantage_weights,
    expectile_loss,
    gaussian_log_likelihood,
)
from seed_agents.losses.policy_gradient import (
    baseline_loss,
    clipped_surrogate_loss,
    entropy_loss,
    explained_variance,
    kl_divergence,
    masked_mean,
    normalize,
    policy_gradient_loss,
)
from seed_agents.losses.q_learning import (
    double_q_targets,
    huber_td_loss,
    inverse_rescale,
    n_step_double_q_targets,
    rescale,
)
from seed_agents.losses.vtrace import VTraceReturns, vtrace_returns

__all__ = [
    "VTraceReturns", "advantage_weights", "baseline_loss", "categorical_cross_entropy",
    "categorical_projection", "clipped_double_q_target",
    "clipped_surrogate_loss", "critic_regression", "double_q_targets", "dpg_loss",
    "entropy_loss", "expected_value", "expectile_loss", "explained_variance", "gaussian_kl",
    "gaussian_log_likelihood", "huber_td_loss", "inverse_rescale", "kl_divergence",
    "masked_mean", "mixture_and_means", "mpo_policy_loss", "mpo_temperature_and_weights",
    "n_step_double_q_targets", "normalize", "policy_gradient_loss", "rescale",
    "smoothed_target_action", "td3_bc_actor_loss", "vtrace_returns",
]
