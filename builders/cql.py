"""Discrete CQL: an offline agent that improves on its dataset."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.base import require_discrete_actions
from builders.offline import OfflineAgentBuilder
from seed_agents.agents.cql.config import CQLConfig
from seed_agents.agents.cql.learning import CQLLearner
from seed_agents.agents.cql.networks import CQLNetworks
from seed_agents.policies import EpsilonGreedyPolicy
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class CQLBuilder(OfflineAgentBuilder):
    config: CQLConfig = dataclasses.field(default_factory=CQLConfig)

    agent_name: ClassVar[str] = "CQL"

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        require_discrete_actions(env_spec, "CQL (discrete)")

    def make_networks(self, env_spec: EnvironmentSpec) -> CQLNetworks:
        return CQLNetworks(env_spec.observations.shape, env_spec.num_actions,
                           self.config.hidden_sizes)

    def make_policy(
        self, networks: CQLNetworks, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> EpsilonGreedyPolicy:
        return EpsilonGreedyPolicy(networks.q, env_spec, self.config.epsilon,
                                   evaluation=evaluation, seed=seed)

    def make_learner(
        self,
        networks: CQLNetworks,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> CQLLearner:
        return CQLLearner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger)
