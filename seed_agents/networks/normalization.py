"""Running mean and variance of vector observations, which a network reads standardized.

PPO implementations standardize vector observations by statistics of everything seen so
far (rl_games' `normalize_input`, SB3's `VecNormalize`, CleanRL's continuous PPO): a task
whose features differ in scale by orders of magnitude (a cart's position in metres, a
joint's velocity in radians per second) then starts with inputs of order 1 everywhere.
Pixels and MinAtar's 0/1 planes need none: they are scaled to [0, 1] where they are read.

In SEED the statistics belong to the network, not to the actors: the inference server acts
with the learner's variables, so statistics kept as (non-trainable) variables of the
network reach the policy, the checkpoints and the exported model with the weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


class ObservationNormalizer(tf.Module):
    """Per-feature running statistics of observations; `normalize` standardizes and clips.

    `update` merges a batch's count, mean and sum of squared deviations into the totals
    (Chan et al.'s parallel form of Welford's algorithm), so the result is the mean and
    variance of every observation seen, whatever the batch sizes, without the
    cancellation of sum(x^2) - n mean^2. The statistics are float64 for the same reason.
    Before any update the mean is 0 and the variance 1: `normalize` only clips.
    """

    EPSILON = 1e-8

    def __init__(self, shape: Sequence[int], clip: float, name: str = "observation_normalizer"):
        super().__init__(name=name)
        if clip <= 0:
            raise ValueError(f"clip must be > 0, got {clip}.")
        self._clip = float(clip)
        shape = list(shape)
        with self.name_scope:
            self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")
            self.mean = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="mean")
            self.sum_squares = tf.Variable(tf.zeros(shape, tf.float64), trainable=False,
                                           name="sum_squares")

    @property
    def variance(self) -> tf.Tensor:
        return tf.where(self.count > 1.0, self.sum_squares / tf.maximum(self.count, 1.0),
                        tf.ones_like(self.sum_squares))

    def normalize(self, observation: tf.Tensor) -> tf.Tensor:
        """[B, *shape] -> float32 (x - mean) / sqrt(variance + eps), clipped to +-clip."""
        std = tf.sqrt(self.variance + self.EPSILON)
        x = (tf.cast(observation, tf.float64) - self.mean) / std
        return tf.cast(tf.clip_by_value(x, -self._clip, self._clip), tf.float32)

    def update(self, observation: tf.Tensor, mask: tf.Tensor | None = None) -> None:
        """Folds the rows of `observation` [N, *shape] where `mask` [N] is nonzero in."""
        x = tf.cast(observation, tf.float64)
        weights = (tf.ones(tf.shape(x)[:1], tf.float64) if mask is None
                   else tf.cast(mask, tf.float64))
        weights = tf.reshape(weights, tf.concat([tf.shape(weights), tf.ones(
            [tf.rank(x) - 1], tf.int32)], 0))
        n = tf.reduce_sum(weights)
        # Branch-free, so that it traces into a learner's graph: an empty batch adds 0.
        batch_mean = tf.math.divide_no_nan(tf.reduce_sum(weights * x, axis=0), n)
        batch_squares = tf.reduce_sum(weights * tf.square(x - batch_mean), axis=0)
        total = self.count + n
        share = tf.math.divide_no_nan(n, total)
        delta = batch_mean - self.mean
        self.mean.assign_add(delta * share)
        self.sum_squares.assign_add(batch_squares + tf.square(delta) * self.count * share)
        self.count.assign(total)
