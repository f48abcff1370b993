"""The TD3 agent, in the SEED arrangement (as SAC and D4PG): central inference writes
n-step transitions to a rate-limited uniform table; one learner updates the networks the
policy reads. With `bc_alpha` it is TD3+BC, for `train --dataset` (offline)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.transitions import TransitionAgentBuilder
from seed_agents.agents.td3.acting import TD3Policy
from seed_agents.agents.td3.config import TD3Config
from seed_agents.agents.td3.learning import TD3Learner
from seed_agents.agents.td3.networks import TD3Networks
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class TD3Builder(TransitionAgentBuilder):
    config: TD3Config = dataclasses.field(default_factory=TD3Config)

    agent_name: ClassVar[str] = "TD3"

    def make_networks(self, env_spec: EnvironmentSpec) -> TD3Networks:
        c = self.config
        return TD3Networks(env_spec.observations.shape, env_spec.action_size,
                           c.actor_hidden_sizes, c.critic_hidden_sizes,
                           layer_norm_mlp=c.layer_norm_mlp)

    def make_policy(self, networks: TD3Networks, env_spec: EnvironmentSpec,
                    evaluation: bool = False, seed: int | None = None,
                    num_envs: int = 1) -> TD3Policy:
        c = self.config
        return TD3Policy(networks, env_spec, c.sigma, c.num_eval_envs, evaluation, seed)

    def make_learner(self, networks: TD3Networks, replay_address: str,
                     counter: Counter | None = None,
                     logger: Logger | None = None) -> TD3Learner:
        return TD3Learner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger,
                          samples_per_insert=self.samples_per_insert(replay_address))
