"""IQL's networks: a Gaussian policy, a state value, twin critics and their targets."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.networks.actor_critic import Critics, follow, make_variables
from seed_agents.networks.gaussian import GaussianActor
from seed_agents.networks.mlp import flatten_observation, mlp, run


class IQLNetworks(tf.Module):
    """`actor(obs)` is the Gaussian policy's (mean, stddev) [B, d] (`GaussianActor`: not
    tanh-squashed, as recorded actions sit on the [-1, 1] bounds where a squashed density
    is infinite; acting clips); `value(obs)` is V(s) [B]; `critics` and `target_critics`
    are Q_1, Q_2 and their Polyak copies. Variables are made at construction."""

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 hidden_sizes: Sequence[int] = (256, 256),
                 critic_hidden_sizes: Sequence[int] = (256, 256), init_scale: float = 1.0,
                 min_scale: float = 0.0067, name: str = "iql"):
        super().__init__(name=name)
        self.action_size = action_size
        with self.name_scope:
            self.actor = GaussianActor(hidden_sizes, action_size, init_scale, min_scale,
                                       "actor")
            self.value_layers = [*mlp(hidden_sizes, "value"),
                                 tf.keras.layers.Dense(1, name="value_out")]
            self.critics = Critics(critic_hidden_sizes, 2, "critic")
            self.target_critics = Critics(critic_hidden_sizes, 2, "target_critic")
        observation = tf.zeros([1, *observation_shape])
        self.value(observation)
        make_variables(self.actor, self.critics, observation_shape, action_size)
        make_variables(None, self.target_critics, observation_shape, action_size)
        follow(self.target_critics, self.critics)

    @property
    def value_variables(self) -> list[tf.Variable]:
        return [v for layer in self.value_layers for v in layer.trainable_variables]

    def value(self, observation: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(run(self.value_layers, flatten_observation(observation)), -1)
