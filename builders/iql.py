"""Implicit Q-learning: an offline agent for continuous actions, from a recorded dataset."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.offline import OfflineAgentBuilder
from seed_agents.agents.iql.acting import IQLPolicy
from seed_agents.agents.iql.config import IQLConfig
from seed_agents.agents.iql.learning import IQLLearner
from seed_agents.agents.iql.networks import IQLNetworks
from seed_agents.envs.action_scaling import is_canonical
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class IQLBuilder(OfflineAgentBuilder):
    config: IQLConfig = dataclasses.field(default_factory=IQLConfig)

    agent_name: ClassVar[str] = "IQL"

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        if env_spec.discrete_actions or not is_canonical(env_spec.actions):
            raise ValueError(
                f"IQL learns continuous actions in [-1, 1] (float32, shape (d,)); this "
                f"environment's action spec is {env_spec.actions!r}. For discrete actions, "
                "take --agent cql or --agent bc.")

    def make_networks(self, env_spec: EnvironmentSpec) -> IQLNetworks:
        c = self.config
        return IQLNetworks(env_spec.observations.shape, env_spec.action_size, c.hidden_sizes,
                           c.critic_hidden_sizes, c.init_scale, c.min_scale)

    def make_policy(self, networks: IQLNetworks, env_spec: EnvironmentSpec,
                    evaluation: bool = False, seed: int | None = None,
                    num_envs: int = 1) -> IQLPolicy:
        return IQLPolicy(networks, env_spec, evaluation, seed)

    def make_learner(self, networks: IQLNetworks, replay_address: str,
                     counter: Counter | None = None,
                     logger: Logger | None = None) -> IQLLearner:
        return IQLLearner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger)
