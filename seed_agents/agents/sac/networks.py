"""SAC's networks: a tanh-Gaussian policy, twin critics, their targets, the temperature."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from seed_agents.networks.mlp import (
    critic_input,
    flatten_observation,
    mlp,
    run,
)
from seed_agents.networks.target_updates import update_target

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""The policy's log standard deviation is squashed into this range: wide enough to start
near-uniform over [-1, 1] and to become nearly deterministic, narrow enough that neither
exp(log_std) nor the log-probability overflows early in training."""


def tanh_log_det_jacobian(pre_tanh: tf.Tensor) -> tf.Tensor:
    """log |d tanh(u) / du| = log(1 - tanh(u)^2), summed over the action's entries.

    Written as 2 (log 2 - u - softplus(-2u)), which stays finite where tanh(u) rounds to
    +-1 (the naive form gives log 0 there).
    """
    return tf.reduce_sum(2.0 * (np.log(2.0) - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh)),
                         axis=-1)


class SACNetworks(tf.Module):
    """Policy, two critics with target copies, and log(alpha).

    `policy(obs)` gives the Gaussian's mean and log std before the tanh; `sample` and
    `mode` squash it into [-1, 1]^d. Variables are made at construction, so the learner's
    and the policy's `tf.function`s (traced on different threads) never create any.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        actor_hidden_sizes: Sequence[int] = (256, 256),
        critic_hidden_sizes: Sequence[int] = (256, 256),
        initial_temperature: float = 1.0,
        name: str = "sac",
        layer_norm_mlp: bool = False,
    ):
        super().__init__(name=name)
        self.action_size = action_size
        with self.name_scope:
            self.actor = [*mlp(actor_hidden_sizes, "actor", layer_norm_mlp),
                          tf.keras.layers.Dense(2 * action_size, name="actor_out")]
            self.critics = [self._critic(critic_hidden_sizes, f"critic_{i}", layer_norm_mlp)
                            for i in (0, 1)]
            self.target_critics = [
                self._critic(critic_hidden_sizes, f"target_critic_{i}", layer_norm_mlp)
                for i in (0, 1)]
            self.log_temperature = tf.Variable(np.log(initial_temperature), dtype=tf.float32,
                                               name="log_temperature")
        observation = tf.zeros([1, *observation_shape])
        action = tf.zeros([1, action_size])
        self.policy(observation)
        self.q_values(observation, action)
        self.q_values(observation, action, target=True)
        update_target(self.target_critic_variables, self.critic_variables)

    @staticmethod
    def _critic(sizes: Sequence[int], name: str,
                layer_norm: bool = False) -> list[tf.keras.layers.Layer]:
        return [*mlp(sizes, name, layer_norm), tf.keras.layers.Dense(1, name=f"{name}_out")]

    @property
    def actor_variables(self) -> list[tf.Variable]:
        return [v for layer in self.actor for v in layer.trainable_variables]

    @property
    def critic_variables(self) -> list[tf.Variable]:
        return [v for critic in self.critics for layer in critic
                for v in layer.trainable_variables]

    @property
    def target_critic_variables(self) -> list[tf.Variable]:
        return [v for critic in self.target_critics for layer in critic
                for v in layer.trainable_variables]

    def policy(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(mean, log_std) of the Gaussian before the tanh, each [B, d]."""
        out = run(self.actor, flatten_observation(observation))
        mean, raw = tf.split(out, 2, axis=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tf.tanh(raw) + 1.0)
        return mean, log_std

    def sample(self, observation: tf.Tensor, noise: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """An action tanh(mean + std * noise) and its log-probability, with the
        log-det-Jacobian of the tanh subtracted (the density of the squashed action).
        `noise` is standard normal [B, d], drawn by the caller's generator."""
        mean, log_std = self.policy(observation)
        pre_tanh = mean + tf.exp(log_std) * noise
        gaussian = tf.reduce_sum(-0.5 * tf.square(noise) - log_std - 0.5 * np.log(2 * np.pi),
                                 axis=-1)
        return tf.tanh(pre_tanh), gaussian - tanh_log_det_jacobian(pre_tanh)

    def mode(self, observation: tf.Tensor) -> tf.Tensor:
        """The deterministic action tanh(mean): what evaluation acts with."""
        mean, _ = self.policy(observation)
        return tf.tanh(mean)

    def q_values(self, observation: tf.Tensor, action: tf.Tensor,
                 target: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Both critics' Q(s, a), each [B]; the target copies' with `target`."""
        x = critic_input(observation, action)
        critics = self.target_critics if target else self.critics
        return tuple(tf.squeeze(run(critic, x), -1) for critic in critics)
