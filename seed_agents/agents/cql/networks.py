"""CQL's networks: an MLP of Q-values over the discrete actions, and its target copy."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.agents.common.continuous_networks import flatten_observation, mlp, run


class QNetwork(tf.Module):
    """MLP: observation -> Q [B, A]. Built (variables made) at construction."""

    def __init__(self, observation_shape: Sequence[int], num_actions: int,
                 hidden_sizes: Sequence[int], name: str = "q"):
        super().__init__(name=name)
        self.num_actions = num_actions
        self._layers = [*mlp(hidden_sizes, f"{name}_torso"),
                        tf.keras.layers.Dense(num_actions, name=f"{name}_head")]
        self(tf.zeros((1, *observation_shape), tf.float32))

    def __call__(self, observation: tf.Tensor) -> tf.Tensor:
        return run(self._layers, flatten_observation(observation))


class CQLNetworks(tf.Module):
    """The online Q network the policy reads, and the learner's target copy.

    `variables` lists the online network's first: the evaluator and `get_variables`
    hand out only those (`policy_variables`)."""

    def __init__(self, observation_shape: Sequence[int], num_actions: int,
                 hidden_sizes: Sequence[int]):
        super().__init__(name="cql")
        self.q = QNetwork(observation_shape, num_actions, hidden_sizes, "q")
        self.target_q = QNetwork(observation_shape, num_actions, hidden_sizes, "target_q")
        for target, source in zip(self.target_q.variables, self.q.variables, strict=True):
            target.assign(source)

    @property
    def num_actions(self) -> int:
        return self.q.num_actions
