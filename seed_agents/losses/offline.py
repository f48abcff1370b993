"""Losses of learning from a fixed dataset: likelihood of its actions, expectile values,
advantage weights.

Behaviour cloning maximizes `gaussian_log_likelihood` of the data's actions. Implicit
Q-learning (Kostrikov, Nair and Levine 2021) never asks the critic about an action the
data lacks: V(s) is an upper `expectile_loss` of Q(s, a) over the data's actions, and the
policy clones the data's actions weighted by `advantage_weights` exp(beta (Q - V)).
"""

from __future__ import annotations

import math

import tensorflow as tf

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_likelihood(action: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """log N(action; mean, exp(log_std)^2), summed over the last (the action's) axis: [B]
    for [B, d]; `mean` and `log_std` broadcast against `action` (MPO's [N, B, d] samples
    against [B, d] gives [N, B])."""
    z = (action - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - _HALF_LOG_2PI, axis=-1)


def expectile_loss(difference: tf.Tensor, expectile: float) -> tf.Tensor:
    """mean |expectile - 1(u < 0)| u^2 over u = `difference` (target - prediction).

    At 0.5 it is half the squared error (the mean); above 0.5 a prediction below its
    target costs more than one above, so the minimizer moves towards the target's upper
    expectile (IQL's V(s) towards the best of the data's Q(s, a) as expectile -> 1)."""
    weight = tf.where(difference < 0.0, 1.0 - expectile, expectile)
    return tf.reduce_mean(weight * tf.square(difference))


def advantage_weights(advantage: tf.Tensor, temperature: float,
                      max_weight: float) -> tf.Tensor:
    """min(exp(temperature * advantage), max_weight), gradient stopped: how much each of
    the data's actions is cloned (advantage-weighted regression; IQL clips at 100)."""
    return tf.stop_gradient(tf.minimum(tf.exp(temperature * advantage), max_weight))
