"""CQL's networks: the online Q network (`seed_agents.networks.QNetwork`) and its target copy."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.networks.q_network import QNetwork


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
