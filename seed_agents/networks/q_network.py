"""An MLP of Q-values over discrete actions: DQN's network, and discrete CQL's."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.networks.mlp import flatten_observation, mlp, run


class QNetwork(tf.Module):
    """MLP: observation -> Q [B, A]. Built (variables made) at construction, so a clone
    made with the same arguments lists its variables in the same order (what
    `update_target` pairs up)."""

    def __init__(self, observation_shape: Sequence[int], num_actions: int,
                 hidden_sizes: Sequence[int], name: str = "q"):
        super().__init__(name=name)
        self.num_actions = num_actions
        self._layers = [*mlp(hidden_sizes, f"{name}_torso"),
                        tf.keras.layers.Dense(num_actions, name=f"{name}_head")]
        self(tf.zeros((1, *observation_shape), tf.float32))

    def __call__(self, observation: tf.Tensor) -> tf.Tensor:
        return run(self._layers, flatten_observation(observation))
