"""The V-trace (IMPALA) agent, in the SEED arrangement: a FIFO queue of unrolls."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import reverb

from builders.base import AgentBuilder, require_discrete_actions
from seed_agents import core
from seed_agents.agents.vtrace.acting import VTracePolicy
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.learning import VTraceLearner
from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.networks.torsos import check_torso_observation
from seed_agents.replay import make_dataset, queue_table, unroll_signature
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class VTraceBuilder(AgentBuilder):
    config: VTraceConfig = dataclasses.field(default_factory=VTraceConfig)

    # The queue holds unrolls of the policy of the moment: after a restart they would be
    # stale, and the queue refills within seconds. The learner still checkpoints.
    checkpoint_replay: ClassVar[bool] = False
    logs_feature_health: ClassVar[bool] = True

    @property
    def unroll_length(self) -> int:
        return self.config.unroll_length

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        require_discrete_actions(env_spec, "V-trace")
        check_torso_observation(self.config.torso, env_spec.observations.shape)

    def make_networks(self, env_spec: EnvironmentSpec) -> PolicyValueNetwork:
        return PolicyValueNetwork(
            env_spec.num_actions,
            env_spec.observations.shape,
            self.config.hidden_sizes,
            self.config.lstm_size,
            self.config.separate_value_torso,
            self.config.torso,
            self.config.precision,
            self.config.observation_normalization,
            self.config.observation_clip,
        )

    def make_policy(
        self, networks: PolicyValueNetwork, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> VTracePolicy:
        return VTracePolicy(networks, env_spec, greedy=evaluation, seed=seed)

    def make_replay_tables(
        self, env_spec: EnvironmentSpec, policy: core.Policy
    ) -> list[reverb.Table]:
        signature = unroll_signature(
            env_spec, self.unroll_length, policy.extras_spec, policy.state_spec
        )
        return [queue_table(self.table, self.config.queue_size, signature)]

    def make_learner(
        self,
        networks: Any,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> VTraceLearner:
        dataset = make_dataset(
            replay_address, self.table, self.config.batch_size, prefetch=self.config.prefetch
        )
        return VTraceLearner(networks, dataset, self.config, counter=counter, logger=logger)
