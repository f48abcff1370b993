"""Building blocks of dense networks: MLPs, and critics on (observation, action).

Observations are flat vectors here (MuJoCo and Control Suite states); the MLP layers are
the same ReLU `Dense` stacks the discrete agents' torsos use.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def mlp(sizes: Sequence[int], name: str) -> list[tf.keras.layers.Layer]:
    """ReLU `Dense` layers `<name>_<i>` of `sizes`."""
    return [tf.keras.layers.Dense(size, activation="relu", name=f"{name}_{i}")
            for i, size in enumerate(sizes)]


def run(layers: Sequence[tf.keras.layers.Layer], x: tf.Tensor) -> tf.Tensor:
    """Applies `layers` in order."""
    for layer in layers:
        x = layer(x)
    return x


def flatten_observation(observation: tf.Tensor) -> tf.Tensor:
    """[B, ...] observations as float32 [B, features]."""
    x = tf.cast(observation, tf.float32)
    return tf.reshape(x, [tf.shape(x)[0], -1])


def critic_input(observation: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    """What a critic sees: the flattened observation and the action, side by side."""
    return tf.concat([flatten_observation(observation), tf.cast(action, tf.float32)], axis=-1)
