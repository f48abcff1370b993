"""The SAC agent, in the SEED arrangement: central inference writes n-step transitions to
a rate-limited uniform table; one learner updates the networks the policy reads."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.transitions import TransitionAgentBuilder
from seed_agents.agents.sac.acting import SACPolicy
from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.sac.learning import SACLearner
from seed_agents.agents.sac.networks import SACNetworks
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class SACBuilder(TransitionAgentBuilder):
    config: SACConfig = dataclasses.field(default_factory=SACConfig)

    agent_name: ClassVar[str] = "SAC"

    def make_networks(self, env_spec: EnvironmentSpec) -> SACNetworks:
        c = self.config
        return SACNetworks(env_spec.observations.shape, env_spec.action_size,
                           c.actor_hidden_sizes, c.critic_hidden_sizes, c.initial_temperature,
                           layer_norm_mlp=c.layer_norm_mlp)

    def make_policy(
        self, networks: SACNetworks, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> SACPolicy:
        return SACPolicy(networks, env_spec, self.config.num_eval_envs, evaluation, seed)

    def make_learner(
        self,
        networks: SACNetworks,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> SACLearner:
        return SACLearner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger,
                          samples_per_insert=self.samples_per_insert(replay_address))
