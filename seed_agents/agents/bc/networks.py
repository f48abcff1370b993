"""The behaviour-cloning network: an MLP with a logits head (discrete actions) or a
Gaussian's mean and log-std heads (continuous actions)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.networks.mlp import flatten_observation, mlp, run


class BCNetwork(tf.Module):
    """`logits(obs)` [B, A] for discrete actions; `gaussian(obs)` (mean, log_std), each
    [B, d], for continuous ones. Built (variables made) at construction."""

    def __init__(self, observation_shape: Sequence[int], num_actions: int | None,
                 action_size: int | None, hidden_sizes: Sequence[int],
                 log_std_range: tuple[float, float] = (-5.0, 1.0)):
        super().__init__(name="bc")
        if (num_actions is None) == (action_size is None):
            raise ValueError("Give num_actions (discrete) or action_size (continuous).")
        self.discrete = num_actions is not None
        self.num_actions = num_actions
        self.action_size = action_size
        self._log_std_range = log_std_range
        self._torso = mlp(hidden_sizes, "torso")
        outputs = num_actions if self.discrete else 2 * action_size
        self._head = tf.keras.layers.Dense(outputs, name="head")
        self._head(run(self._torso, tf.zeros((1, *observation_shape), tf.float32)))

    def _outputs(self, observation: tf.Tensor) -> tf.Tensor:
        return self._head(run(self._torso, flatten_observation(observation)))

    def logits(self, observation: tf.Tensor) -> tf.Tensor:
        return self._outputs(observation)

    def gaussian(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        mean, log_std = tf.split(self._outputs(observation), 2, axis=-1)
        return mean, tf.clip_by_value(log_std, *self._log_std_range)
