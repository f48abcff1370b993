"""Targets and losses, as functions of tensors (no networks, no state).

Q-learning: `double_q_targets` over a batch of n-step transitions and `huber_td_loss`
(DQN, discrete CQL); `n_step_double_q_targets` with `rescale` over sequences (R2D2).
Policy gradients over time-major [T, B] unrolls: `vtrace_returns` (IMPALA's off-policy
corrected targets and advantages), `policy_gradient_loss`, `clipped_surrogate_loss`
(PPO's clip), `baseline_loss`, `entropy_loss`, `kl_divergence`, each a masked mean.
"""

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
    "VTraceReturns", "baseline_loss", "clipped_surrogate_loss", "double_q_targets",
    "entropy_loss", "explained_variance", "huber_td_loss", "inverse_rescale",
    "kl_divergence", "masked_mean", "n_step_double_q_targets", "normalize",
    "policy_gradient_loss", "rescale", "vtrace_returns",
]
