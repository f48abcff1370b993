"""Losses of deterministic-policy actor-critics: TD3's target and the policy gradient.

Fujimoto, van Hoof and Meger 2018 (TD3): the critics' target takes the smaller of two
target critics (clipped double Q) at a smoothed target action (the target actor's action
plus clipped Gaussian noise); the actor follows the deterministic policy gradient through
the first critic. Fujimoto and Gu 2021 (TD3+BC) add a behaviour-cloning term for offline
data, with the Q term normalized by its scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def smoothed_target_action(target_action: tf.Tensor, noise: tf.Tensor,
                           noise_clip: float) -> tf.Tensor:
    """clip(pi'(o') + clip(noise, -noise_clip, noise_clip), -1, 1): target policy
    smoothing. `noise` is the caller's N(0, sigma^2) draw, [B, d]."""
    clipped = tf.clip_by_value(noise, -noise_clip, noise_clip)
    return tf.clip_by_value(target_action + clipped, -1.0, 1.0)


def clipped_double_q_target(reward: tf.Tensor, discount: tf.Tensor,
                            next_q: Sequence[tf.Tensor]) -> tf.Tensor:
    """R + D min_i Q'_i(o', a'), gradient stopped (D holds gamma^n, 0 at termination)."""
    return tf.stop_gradient(reward + discount * tf.reduce_min(tf.stack(next_q), axis=0))


def critic_regression(q: Sequence[tf.Tensor], target: tf.Tensor) -> tf.Tensor:
    """sum_i mean (Q_i - y)^2: each critic regressed on the same target."""
    return tf.add_n([tf.reduce_mean(tf.square(q_i - target)) for q_i in q])


def dpg_loss(q: tf.Tensor) -> tf.Tensor:
    """-mean Q(o, pi(o)): its gradient is the deterministic policy gradient."""
    return -tf.reduce_mean(q)


def td3_bc_actor_loss(q: tf.Tensor, policy_action: tf.Tensor, data_action: tf.Tensor,
                      alpha: float) -> tf.Tensor:
    """-lambda mean Q(o, pi(o)) + mean ||pi(o) - a||^2 with lambda = alpha / mean |Q|
    (TD3+BC: the scale of Q divided out, so that alpha weighs the two terms alike on any
    task; lambda's gradient is stopped)."""
    scale = tf.stop_gradient(alpha / (tf.reduce_mean(tf.abs(q)) + 1e-6))
    cloning = tf.reduce_mean(tf.reduce_sum(tf.square(policy_action - data_action), -1))
    return -scale * tf.reduce_mean(q) + cloning
