"""D4PG's networks: a deterministic tanh policy and a categorical critic, with targets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from seed_agents.losses.distributional import expected_value
from seed_agents.networks.mlp import (
    critic_input,
    flatten_observation,
    mlp,
    run,
)
from seed_agents.networks.target_updates import update_target


class D4PGNetworks(tf.Module):
    """Policy and distributional critic, with target copies that start equal."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        actor_hidden_sizes: Sequence[int] = (256, 256),
        critic_hidden_sizes: Sequence[int] = (256, 256),
        num_atoms: int = 51,
        v_min: float = -150.0,
        v_max: float = 150.0,
        name: str = "d4pg",
        layer_norm_mlp: bool = False,
    ):
        super().__init__(name=name)
        self.action_size = action_size
        self.support = tf.constant(np.linspace(v_min, v_max, num_atoms), tf.float32)
        with self.name_scope:
            self.actor, self.target_actor = (
                [*mlp(actor_hidden_sizes, f"{prefix}actor", layer_norm_mlp),
                 tf.keras.layers.Dense(action_size, activation="tanh",
                                       name=f"{prefix}actor_out")]
                for prefix in ("", "target_"))
            self.critic, self.target_critic = (
                [*mlp(critic_hidden_sizes, f"{prefix}critic", layer_norm_mlp),
                 tf.keras.layers.Dense(num_atoms, name=f"{prefix}critic_out")]
                for prefix in ("", "target_"))
        observation = tf.zeros([1, *observation_shape])
        for target in (False, True):
            self.critic_logits(observation, self.policy(observation, target), target)
        update_target(self.target_variables, self.online_variables)

    @property
    def actor_variables(self) -> list[tf.Variable]:
        return [v for layer in self.actor for v in layer.trainable_variables]

    @property
    def critic_variables(self) -> list[tf.Variable]:
        return [v for layer in self.critic for v in layer.trainable_variables]

    @property
    def online_variables(self) -> list[tf.Variable]:
        return self.actor_variables + self.critic_variables

    @property
    def target_variables(self) -> list[tf.Variable]:
        return [v for layer in self.target_actor + self.target_critic
                for v in layer.trainable_variables]

    def policy(self, observation: tf.Tensor, target: bool = False) -> tf.Tensor:
        """The deterministic action in [-1, 1]^d, [B, d]."""
        return run(self.target_actor if target else self.actor,
                   flatten_observation(observation))

    def critic_logits(self, observation: tf.Tensor, action: tf.Tensor,
                      target: bool = False) -> tf.Tensor:
        """Logits of Z(s, a) over `support`, [B, num_atoms]."""
        return run(self.target_critic if target else self.critic,
                   critic_input(observation, action))

    def q_value(self, logits: tf.Tensor) -> tf.Tensor:
        """E[Z] of critic logits, [B]."""
        return expected_value(logits, self.support)
