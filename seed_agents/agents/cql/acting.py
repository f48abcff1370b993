"""The CQL policy: greedy on Q (evaluation), epsilon-greedy otherwise."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.common.feedforward_policy import FeedForwardPolicy
from seed_agents.agents.cql.networks import QNetwork
from seed_agents.specs import EnvironmentSpec


class QPolicy(FeedForwardPolicy):
    """argmax_a Q(o, a), with `epsilon` of the actions uniform instead (0: greedy)."""

    def __init__(self, network: QNetwork, env_spec: EnvironmentSpec, epsilon: float = 0.0,
                 seed: int | None = None):
        self._network = network
        self._epsilon = float(epsilon)
        super().__init__(env_spec, seed)

    def _act(self, observation: tf.Tensor) -> tf.Tensor:
        q = self._network(observation)
        action = tf.argmax(q, axis=-1, output_type=tf.int32)
        if self._epsilon > 0:
            batch = tf.shape(q)[:1]
            random = self._rng.uniform(batch, 0, self._network.num_actions, dtype=tf.int32)
            action = tf.where(self._rng.uniform(batch) < self._epsilon, random, action)
        return action
