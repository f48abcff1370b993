"""The D4PG agent, in the SEED arrangement: central inference writes 5-step transitions to
a rate-limited uniform table; one learner updates the networks the policy reads."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.transitions import TransitionAgentBuilder
from seed_agents.agents.d4pg.acting import D4PGPolicy
from seed_agents.agents.d4pg.config import D4PGConfig
from seed_agents.agents.d4pg.learning import D4PGLearner
from seed_agents.agents.d4pg.networks import D4PGNetworks
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class D4PGBuilder(TransitionAgentBuilder):
    config: D4PGConfig = dataclasses.field(default_factory=D4PGConfig)

    agent_name: ClassVar[str] = "D4PG"

    def make_networks(self, env_spec: EnvironmentSpec) -> D4PGNetworks:
        c = self.config
        return D4PGNetworks(env_spec.observations.shape, env_spec.action_size,
                            c.actor_hidden_sizes, c.critic_hidden_sizes, c.num_atoms,
                            c.v_min, c.v_max, layer_norm_mlp=c.layer_norm_mlp)

    def make_policy(
        self, networks: D4PGNetworks, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> D4PGPolicy:
        c = self.config
        return D4PGPolicy(networks, env_spec, c.sigma, c.num_eval_envs, evaluation, seed)

    def make_learner(
        self,
        networks: D4PGNetworks,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> D4PGLearner:
        return D4PGLearner(networks, self.make_dataset(replay_address), self.config,
                           counter=counter, logger=logger,
                           samples_per_insert=self.samples_per_insert(replay_address))
