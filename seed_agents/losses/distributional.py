"""Categorical (C51-style) critics' targets and loss, as D4PG and distributional MPO use them.

A categorical critic gives logits over a fixed, evenly spaced support of returns; its
target is the distribution of R + D Z' projected back onto that support, and it learns by
the cross-entropy to that target. Bellemare, Dabney and Munos 2017 (C51); Barth-Maron et
al. 2018 (D4PG); Acme's DMPO averages the target critic's distributions over the sampled
next actions before projecting (`mixture_and_means`).
"""

from __future__ import annotations

import tensorflow as tf


def categorical_projection(probabilities: tf.Tensor, reward: tf.Tensor, discount: tf.Tensor,
                           support: tf.Tensor) -> tf.Tensor:
    """Projects the distribution `reward + discount * Z` back onto `support`.

    `probabilities` [B, N] are Z's masses on `support` [N] (evenly spaced); `reward` and
    `discount` are [B]. Each shifted atom's mass is split between the two support points
    around it, in proportion to closeness (C51's projection), after clipping into
    [support[0], support[-1]]. Written as a triangle kernel, max(0, 1 - |b_j - i|), which
    gives every atom's share of every point in one [B, N, N] product: no scatter, and an
    atom landing exactly on a point gives it all its mass.
    """
    v_min, v_max = support[0], support[-1]
    spacing = (v_max - v_min) / tf.cast(tf.shape(support)[0] - 1, support.dtype)
    shifted = tf.clip_by_value(reward[:, None] + discount[:, None] * support[None, :],
                               v_min, v_max)
    position = (shifted - v_min) / spacing  # [B, N]: fractional index of each atom
    points = tf.range(tf.shape(support)[0], dtype=support.dtype)
    share = tf.maximum(0.0, 1.0 - tf.abs(position[:, :, None] - points[None, None, :]))
    return tf.einsum("bj,bji->bi", probabilities, share)


def mixture_and_means(logits: tf.Tensor, support: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """For N distributions per state, logits [N, B, K] over `support` [K]: their equal-weight
    mixture [B, K] (the mean of the N softmaxes) and each one's E[Z] [N, B].

    Distributional MPO needs both of the target critic at the sampled next actions: the
    mixture is what its target projects, the means are what the E-step weighs. One softmax
    serves both ([N, B, K] is 20 x 256 x 51 at the defaults)."""
    probabilities = tf.nn.softmax(logits)
    return (tf.reduce_mean(probabilities, axis=0),
            tf.reduce_sum(probabilities * support, axis=-1))


def expected_value(logits: tf.Tensor, support: tf.Tensor) -> tf.Tensor:
    """E[Z] under softmax(logits) over `support` [K]: logits [..., K] in, [...] out."""
    return tf.reduce_sum(tf.nn.softmax(logits) * support, axis=-1)


def categorical_cross_entropy(target: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """mean_b -sum_k target_bk log softmax(logits)_bk (the target's gradient stopped)."""
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
        labels=tf.stop_gradient(target), logits=logits))
