"""The MPO agent, in the SEED arrangement (as SAC, D4PG and TD3): central inference writes
n-step transitions to a rate-limited uniform table; one learner updates the networks the
policy reads."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from builders.transitions import TransitionAgentBuilder
from seed_agents.agents.mpo.acting import MPOPolicy
from seed_agents.agents.mpo.config import MPOConfig
from seed_agents.agents.mpo.learning import MPOLearner
from seed_agents.agents.mpo.networks import MPONetworks
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class MPOBuilder(TransitionAgentBuilder):
    config: MPOConfig = dataclasses.field(default_factory=MPOConfig)

    agent_name: ClassVar[str] = "MPO"

    def make_networks(self, env_spec: EnvironmentSpec) -> MPONetworks:
        c = self.config
        return MPONetworks(
            env_spec.observations.shape, env_spec.action_size, c.actor_hidden_sizes,
            c.critic_hidden_sizes, init_scale=c.init_scale, min_scale=c.min_scale,
            init_log_temperature=c.init_log_temperature,
            init_log_alpha_mean=c.init_log_alpha_mean,
            init_log_alpha_stddev=c.init_log_alpha_stddev,
            per_dim_constraining=c.per_dim_constraining, critic_type=c.critic_type,
            num_atoms=c.num_atoms, v_min=c.v_min, v_max=c.v_max,
            layer_norm_mlp=c.layer_norm_mlp)

    def make_policy(self, networks: MPONetworks, env_spec: EnvironmentSpec,
                    evaluation: bool = False, seed: int | None = None,
                    num_envs: int = 1) -> MPOPolicy:
        return MPOPolicy(networks, env_spec, self.config.num_eval_envs, evaluation, seed)

    def make_learner(self, networks: MPONetworks, replay_address: str,
                     counter: Counter | None = None,
                     logger: Logger | None = None) -> MPOLearner:
        return MPOLearner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger,
                          samples_per_insert=self.samples_per_insert(replay_address))
