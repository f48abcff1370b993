"""D4PG's networks: a deterministic tanh policy and a categorical critic, with targets."""

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
    ):
        super().__init__(name=name)
        self.action_size = action_size
        self.support = tf.constant(np.linspace(v_min, v_max, num_atoms), tf.float32)
        with self.name_scope:
            self.actor, self.target_actor = (
                [*mlp(actor_hidden_sizes, f"{prefix}actor"),
                 tf.keras.layers.Dense(action_size, activation="tanh",
                                       name=f"{prefix}actor_out")]
                for prefix in ("", "target_"))
            self.critic, self.target_critic = (
                [*mlp(critic_hidden_sizes, f"{prefix}critic"),
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
        return tf.reduce_sum(tf.nn.softmax(logits) * self.support, axis=-1)
