"""Behaviour cloning: an offline agent that fits the dataset's actions."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.offline import OfflineAgentBuilder
from seed_agents.agents.bc.acting import BCPolicy
from seed_agents.agents.bc.config import BCConfig
from seed_agents.agents.bc.learning import BCLearner
from seed_agents.agents.bc.networks import BCNetwork
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class BCBuilder(OfflineAgentBuilder):
    config: BCConfig = dataclasses.field(default_factory=BCConfig)

    agent_name: ClassVar[str] = "BC"

    def make_networks(self, env_spec: EnvironmentSpec) -> BCNetwork:
        discrete = env_spec.discrete_actions
        return BCNetwork(env_spec.observations.shape,
                         env_spec.num_actions if discrete else None,
                         None if discrete else env_spec.action_size,
                         self.config.hidden_sizes,
                         (self.config.min_log_std, self.config.max_log_std))

    def make_policy(
        self, networks: BCNetwork, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> BCPolicy:
        return BCPolicy(networks, env_spec, greedy=evaluation, seed=seed)

    def make_learner(
        self,
        networks: BCNetwork,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> BCLearner:
        return BCLearner(networks, self.make_dataset(replay_address), self.config,
                         counter=counter, logger=logger)
