"""V-trace off-policy targets (Espeholt et al. 2018, "IMPALA", section 4.1).

In the SEED architecture actors act with slightly stale parameters, so the learner's
policy pi differs from the behaviour policy mu that produced the data. V-trace corrects
for that with truncated importance weights rho_t = pi(a_t|x_t) / mu(a_t|x_t):

    clipped_rho_t = min(rho_bar, rho_t)
    c_t           = lambda_ * min(c_bar, rho_t)
    delta_t       = clipped_rho_t * (r_t + discount_t * V(x_{t+1}) - V(x_t))
    vs_t - V(x_t) = delta_t + discount_t * c_t * (vs_{t+1} - V(x_{t+1}))

with V(x_T) = bootstrap_value and vs_T - V(x_T) = 0. rho_bar fixes *which* value
function vs converges to (pi for rho_bar = inf); c_bar only trades variance for speed
of contraction. The policy-gradient advantage uses its own clip, pg_rho_bar:

    pg_advantage_t = min(pg_rho_bar, rho_t) * (r_t + discount_t * vs_{t+1} - V(x_t))

with vs_T = bootstrap_value.

Conventions (all time-major, row t describes the transition x_t -> x_{t+1}):

* `discounts` already contain gamma: gamma for a normal step, 0 for a step that ends the
  episode by termination, gamma (not 0) for a step that ends it by truncation.
* `mask` marks rows whose transition does not exist. The toolkit streams unrolls across
  episode boundaries, so the row holding an episode's LAST observation is followed by
  the FIRST row of the next episode; that row's "transition" into the next episode is
  not real and must carry mask 0. For a masked row the clipped rho, the pg rho and c_t
  are multiplied by 0, which gives vs_t = V(x_t), pg_advantage_t = 0, and cuts the
  backward recursion there: the previous row still bootstraps from V(x_t) (the value of
  the episode's last observation, which is what a truncated episode needs) but nothing
  from the next episode leaks into it.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


class VTraceReturns(NamedTuple):
    """V-trace outputs, both [T, B] and gradient-stopped.

    vs: value targets for the baseline.
    pg_advantages: advantages to weight the policy-gradient log-probabilities with.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor


def _check_rank(tensor: tf.Tensor, rank: int, name: str) -> None:
    # Static check only: it costs nothing in graph mode and catches the common mistake of
    # passing batch-major or unsqueezed tensors. Unknown ranks are let through.
    if tensor.shape.rank is not None and tensor.shape.rank != rank:
        raise ValueError(f"{name} must have rank {rank} (time-major), got shape {tensor.shape}.")


def _check_threshold(value: float | None, name: str) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive or None, got {value}.")


def _clip(rhos: tf.Tensor, threshold: float | None) -> tf.Tensor:
    """min(threshold, rhos); None means no clipping."""
    if threshold is None:
        return rhos
    return tf.minimum(tf.cast(threshold, rhos.dtype), rhos)


def vtrace_returns(
    log_rhos: tf.Tensor,
    discounts: tf.Tensor,
    rewards: tf.Tensor,
    values: tf.Tensor,
    bootstrap_value: tf.Tensor,
    mask: tf.Tensor | None = None,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """Computes V-trace value targets and policy-gradient advantages.

    Args:
      log_rhos: [T, B] log(pi(a_t|x_t) / mu(a_t|x_t)), learner over behaviour policy.
      discounts: [T, B] per-step discounts, gamma already applied (0 at termination).
      rewards: [T, B] reward of the transition x_t -> x_{t+1}.
      values: [T, B] V(x_t) under the learner's current parameters.
      bootstrap_value: [B] V(x_T), the value of the observation after the last row.
      mask: optional [T, B], 1.0 for real transitions, 0.0 for rows whose transition does
        not exist (see the module docstring). None means every row is valid.
      clip_rho_threshold: rho_bar for delta_t; None disables clipping.
      clip_pg_rho_threshold: pg_rho_bar for the advantages; None disables clipping.
      clip_c_threshold: c_bar for the trace coefficients c_t; None disables clipping.
      lambda_: extra trace decay multiplied into c_t (Retrace-style lambda).

    Returns:
      VTraceReturns(vs, pg_advantages), both [T, B] and wrapped in tf.stop_gradient:
      they are regression / weighting targets, never something to differentiate through.
    """
    for threshold, name in (
        (clip_rho_threshold, "clip_rho_threshold"),
        (clip_pg_rho_threshold, "clip_pg_rho_threshold"),
        (clip_c_threshold, "clip_c_threshold"),
    ):
        _check_threshold(threshold, name)
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda_ must be in [0, 1], got {lambda_}.")

    values = tf.convert_to_tensor(values, name="values")
    if not values.dtype.is_floating:
        raise TypeError(f"values must be floating point, got {values.dtype}.")
    dtype = values.dtype
    log_rhos = tf.convert_to_tensor(log_rhos, dtype=dtype, name="log_rhos")
    discounts = tf.convert_to_tensor(discounts, dtype=dtype, name="discounts")
    rewards = tf.convert_to_tensor(rewards, dtype=dtype, name="rewards")
    bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=dtype, name="bootstrap_value")

    for tensor, name in (
        (log_rhos, "log_rhos"),
        (discounts, "discounts"),
        (rewards, "rewards"),
        (values, "values"),
    ):
        _check_rank(tensor, 2, name)
        if not tensor.shape.is_compatible_with(values.shape):
            raise ValueError(
                f"{name} has shape {tensor.shape}, incompatible with values {values.shape}."
            )
    _check_rank(bootstrap_value, 1, "bootstrap_value")
    if not bootstrap_value.shape.is_compatible_with(values.shape[1:]):
        raise ValueError(
            f"bootstrap_value has shape {bootstrap_value.shape}, expected [B] with "
            f"B = {values.shape[1]} (values {values.shape})."
        )

    rhos = tf.exp(log_rhos)
    clipped_rhos = _clip(rhos, clip_rho_threshold)
    pg_rhos = _clip(rhos, clip_pg_rho_threshold)
    cs = tf.cast(lambda_, dtype) * _clip(rhos, clip_c_threshold)
    if mask is not None:
        mask = tf.convert_to_tensor(mask, dtype=dtype, name="mask")
        _check_rank(mask, 2, "mask")
        if not mask.shape.is_compatible_with(values.shape):
            raise ValueError(
                f"mask has shape {mask.shape}, incompatible with values {values.shape}."
            )
        # Zeroing the weights (not the outputs) is what makes a masked row inert: its
        # delta is 0, so vs_t = V(x_t), and its c_t is 0, so the row before it sees
        # vs_t - V(x_t) = 0 and the recursion never reaches into the next episode.
        clipped_rhos *= mask
        pg_rhos *= mask
        cs *= mask

    # V(x_{t+1}) for every row: the next row's value, then the bootstrap after the last.
    values_tp1 = tf.concat([values[1:], bootstrap_value[tf.newaxis]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    def backward_step(acc: tf.Tensor, elems: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        # acc holds vs_{t+1} - V(x_{t+1}); returns vs_t - V(x_t).
        discount_c, delta = elems
        return delta + discount_c * acc

    # tf.scan (not a Python loop) so the recursion works for a T unknown at trace time.
    vs_minus_v = tf.scan(
        backward_step,
        (discounts * cs, deltas),
        initializer=tf.zeros_like(bootstrap_value),  # vs_T - V(x_T) = 0
        reverse=True,
    )
    vs = vs_minus_v + values

    vs_tp1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
    pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)

    return VTraceReturns(
        vs=tf.stop_gradient(vs),
        pg_advantages=tf.stop_gradient(pg_advantages),
    )
