"""IMPALA loss terms over time-major [T, B] unrolls, each reduced to a scalar.

Every term is a *masked mean*: rows whose transition does not exist (mask 0, see
`vtrace.py`) contribute nothing, and the average is over valid rows only so the loss
scale does not depend on how many episode boundaries an unroll happened to contain.
Targets and advantages are stop-gradiented here as well as in `vtrace_returns`, so the
losses stay correct whatever produced them.
"""

from __future__ import annotations

import tensorflow as tf


def masked_mean(x: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
    """sum(mask * x) / max(sum(mask), 1); the plain mean when mask is None.

    The denominator is floored at 1 so an all-masked batch yields 0 instead of NaN,
    which would otherwise poison the optimizer state.
    """
    x = tf.convert_to_tensor(x)
    if mask is None:
        return tf.reduce_mean(x)
    mask = tf.cast(mask, x.dtype)
    if not mask.shape.is_compatible_with(x.shape):
        raise ValueError(f"mask has shape {mask.shape}, incompatible with x {x.shape}.")
    return tf.reduce_sum(mask * x) / tf.maximum(tf.reduce_sum(mask), tf.ones([], x.dtype))


def explained_variance(targets: tf.Tensor, values: tf.Tensor,
                       mask: tf.Tensor | None = None) -> tf.Tensor:
    """1 - Var(targets - values) / Var(targets) over the rows `mask` keeps.

    1: the value predicts its targets exactly; 0: no better than their mean; below 0:
    worse. NaN-free: a batch of constant targets gives 0.
    """
    targets, values = tf.stop_gradient(targets), tf.stop_gradient(values)

    def variance(x: tf.Tensor) -> tf.Tensor:
        return masked_mean(tf.square(x - masked_mean(x, mask)), mask)

    spread = variance(targets)
    return tf.where(spread > 0, 1.0 - variance(targets - values) / tf.maximum(spread, 1e-12),
                    0.0)


def normalize(x: tf.Tensor, mask: tf.Tensor | None = None, epsilon: float = 1e-8) -> tf.Tensor:
    """(x - mean) / (std + epsilon) over the rows `mask` keeps (all rows without a mask).

    Masked rows come out as 0, so they weigh nothing even in a loss that forgets the mask.
    """
    x = tf.stop_gradient(tf.convert_to_tensor(x))
    mean = masked_mean(x, mask)
    std = tf.sqrt(masked_mean(tf.square(x - mean), mask))
    normalized = (x - mean) / (std + epsilon)
    return normalized if mask is None else normalized * tf.cast(mask, x.dtype)


def policy_gradient_loss(
    logits: tf.Tensor,
    actions: tf.Tensor,
    advantages: tf.Tensor,
    mask: tf.Tensor | None = None,
) -> tf.Tensor:
    """-masked_mean(log pi(a_t|x_t) * advantages_t).

    Args:
      logits: [T, B, A] unnormalized action log-probabilities of the learner policy.
      actions: [T, B] integer actions that were taken.
      advantages: [T, B] e.g. `VTraceReturns.pg_advantages`; treated as constants.
      mask: optional [T, B], 1.0 valid / 0.0 invalid.
    """
    logits = tf.convert_to_tensor(logits)
    if logits.shape.rank is not None and logits.shape.rank != 3:
        raise ValueError(f"logits must be [T, B, A], got shape {logits.shape}.")
    # Cross-entropy against the taken action is exactly -log_softmax(logits)[a], computed
    # stably without materializing the full log-softmax.
    neg_log_probs = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(actions, tf.int32), logits=logits
    )
    advantages = tf.stop_gradient(tf.cast(advantages, neg_log_probs.dtype))
    return masked_mean(neg_log_probs * advantages, mask)


def baseline_loss(
    targets: tf.Tensor, values: tf.Tensor, mask: tf.Tensor | None = None
) -> tf.Tensor:
    """0.5 * masked_mean((targets - values)^2); targets (e.g. V-trace vs) are constants."""
    values = tf.convert_to_tensor(values)
    targets = tf.stop_gradient(tf.cast(targets, values.dtype))
    return 0.5 * masked_mean(tf.square(targets - values), mask)


def entropy_loss(logits: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
    """masked_mean(-entropy(softmax(logits))): minimizing it *raises* policy entropy.

    The sign is chosen so that every term is a loss to minimize and the caller only
    picks a positive weight. For uniform logits over A actions it equals -log(A).
    """
    logits = tf.convert_to_tensor(logits)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    neg_entropy = tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1)
    return masked_mean(neg_entropy, mask)


def clipped_surrogate_loss(
    log_rhos: tf.Tensor,
    advantages: tf.Tensor,
    epsilon: float,
    mask: tf.Tensor | None = None,
) -> tf.Tensor:
    """PPO's clipped objective over importance ratios pi/mu, as in APPO.

    `log_rhos` [T, B] must carry the gradient of the learner's log-probabilities; the
    advantages are constants. The clip stops the policy from moving far from the one that
    acted within one batch, which makes several gradient steps per batch safe.
    """
    ratio = tf.exp(log_rhos)
    advantages = tf.stop_gradient(advantages)
    surrogate = tf.minimum(
        ratio * advantages,
        tf.clip_by_value(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantages,
    )
    return -masked_mean(surrogate, mask)


def clip_fraction(log_rhos: tf.Tensor, epsilon: float,
                  mask: tf.Tensor | None = None) -> tf.Tensor:
    """The fraction of samples whose ratio pi/mu lies outside PPO's [1 - eps, 1 + eps].

    Read beside the KL: a sample outside the band gives the clipped objective no gradient
    on its side, so when most of a batch is out, more steps on it (or a larger step size)
    no longer move the policy, whatever the advantages say.
    """
    outside = tf.cast(tf.abs(tf.exp(log_rhos) - 1.0) > epsilon, tf.float32)
    return masked_mean(outside, mask)


def kl_divergence(p_logits: tf.Tensor, q_logits: tf.Tensor,
                  mask: tf.Tensor | None = None) -> tf.Tensor:
    """masked_mean(KL(p || q)) = masked_mean(sum_a p_a (log p_a - log q_a)), p, q softmaxes.

    Args:
      p_logits, q_logits: [T, B, A] unnormalized log-probabilities; for the learner's
        drift from the behaviour policy, p is the behaviour policy mu and q the learner's pi.
      mask: optional [T, B], 1.0 valid / 0.0 invalid.
    """
    p_log_probs = tf.nn.log_softmax(p_logits, axis=-1)
    q_log_probs = tf.nn.log_softmax(q_logits, axis=-1)
    kl = tf.reduce_sum(tf.exp(p_log_probs) * (p_log_probs - q_log_probs), axis=-1)
    return masked_mean(kl, mask)
