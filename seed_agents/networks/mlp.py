"""Building blocks of dense networks: MLPs, and critics on (observation, action).

Observations are flat vectors here (MuJoCo and Control Suite states); the MLP layers are
the same ReLU `Dense` stacks the discrete agents' torsos use, or Acme's `LayerNormMLP`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

LAYER_NORM_INIT_SCALE = 0.333 ** 2
"""`layer_norm=True`'s kernels: uniform with limit 0.333 sqrt(3 / fan_in), Haiku's
`UniformScaling(0.333)` that Acme's `LayerNormMLP` uses (Keras's `VarianceScaling` takes
the square of that scale)."""


def mlp(sizes: Sequence[int], name: str,
        layer_norm: bool = False) -> list[tf.keras.layers.Layer]:
    """`Dense` layers `<name>_<i>` of `sizes`, for `run`.

    Plain (the default): ReLU on every layer. `layer_norm=True` is Acme's `LayerNormMLP`
    (acme/jax/networks/continuous.py, the torso of its MPO, D4PG and SAC control networks):
    the first layer linear, then LayerNorm and tanh, which keep its outputs in a fixed
    range whatever the observations' scales; ELU on the layers after it; kernels drawn
    uniformly at `LAYER_NORM_INIT_SCALE`.
    """
    if not layer_norm:
        return [tf.keras.layers.Dense(size, activation="relu", name=f"{name}_{i}")
                for i, size in enumerate(sizes)]
    layers: list[tf.keras.layers.Layer] = []
    for i, size in enumerate(sizes):
        # One initializer object per layer: Keras warns when an unseeded one is reused.
        init = tf.keras.initializers.VarianceScaling(LAYER_NORM_INIT_SCALE, "fan_in",
                                                     "uniform")
        layers.append(tf.keras.layers.Dense(size, activation=None if i == 0 else "elu",
                                            kernel_initializer=init, name=f"{name}_{i}"))
        if i == 0:
            layers += [tf.keras.layers.LayerNormalization(epsilon=1e-5, name=f"{name}_0_norm"),
                       tf.keras.layers.Activation("tanh", name=f"{name}_0_tanh")]
    return layers


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
