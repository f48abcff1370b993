"""Gaussian policies: an MLP, then the mean and standard deviation of a diagonal Gaussian.

What an agent with a stochastic, unsquashed policy composes: MPO's, whose losses need the
Gaussian's parameters themselves (log-probabilities at given actions and closed-form KLs
to another Gaussian), and IQL's, which clones recorded actions that sit on the bounds. The
mean is unbounded, as the density's support is; acting clips the actions it draws into
[-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from seed_agents.networks.mlp import flatten_observation, mlp, run

HEAD_WEIGHT_SCALE = 1e-4
"""The heads' kernels are drawn from VarianceScaling(1e-4), their biases zero (Acme's
`MultivariateNormalDiagHead` defaults): a new actor's mean is close to 0 and its standard
deviation close to `init_scale` + `min_scale` for every observation."""


class GaussianActor(tf.Module):
    """pi(.|o) = N(mean(o), diag(stddev(o)^2)): ReLU layers, then two linear heads of
    `action_size` units on the last hidden layer (on the observation with no hidden
    layers):

        mean   = linear_mean(h)                                   (unbounded)
        stddev = softplus(linear_scale(h)) * init_scale / softplus(0) + min_scale

    The standard deviation's form is Acme's `MultivariateNormalDiagHead`
    (acme/tf/networks/distributional.py): softplus keeps it positive and smooth, dividing
    by softplus(0) = log 2 makes a zero output give exactly `init_scale`, and `min_scale`
    keeps log-probabilities finite where the softplus underflows. Acme's default
    `init_scale` is 0.3 (its MPO control-suite example uses 0.7); `min_scale` 1e-6.
    `layer_norm=True` makes the layers Acme's `LayerNormMLP` (`seed_agents.networks.mlp`).
    """

    def __init__(self, hidden_sizes: Sequence[int], action_size: int, init_scale: float = 0.3,
                 min_scale: float = 1e-6, name: str = "actor", layer_norm: bool = False):
        super().__init__(name=name)
        if init_scale <= 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale}.")
        if min_scale < 0:
            raise ValueError(f"min_scale must be >= 0, got {min_scale}.")
        self.action_size = action_size
        self.init_scale = float(init_scale)
        self.min_scale = float(min_scale)
        with self.name_scope:
            self.torso = mlp(hidden_sizes, name, layer_norm)
            # One initializer object per layer: Keras warns when an unseeded one is reused.
            self.mean_layer, self.scale_layer = (
                tf.keras.layers.Dense(
                    action_size, name=f"{name}_{head}",
                    kernel_initializer=tf.keras.initializers.VarianceScaling(HEAD_WEIGHT_SCALE))
                for head in ("mean", "scale"))

    def __call__(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean, stddev) of the Gaussian, each [B, d]."""
        hidden = run(self.torso, flatten_observation(observation))
        mean = self.mean_layer(hidden)
        stddev = (tf.nn.softplus(self.scale_layer(hidden)) * (self.init_scale / np.log(2.0))
                  + self.min_scale)
        return mean, stddev

    @property
    def weights(self) -> list[tf.Variable]:
        """Its variables in layer order, the heads last (mean, then scale): a copy of it
        lists them in the same order."""
        layers = (*self.torso, self.mean_layer, self.scale_layer)
        return [v for layer in layers for v in layer.trainable_variables]
