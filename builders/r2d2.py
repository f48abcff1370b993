"""The R2D2 agent, in the SEED arrangement: central inference keeps each environment's
LSTM state and assembles overlapping sequences into a prioritized Reverb table."""

from __future__ import annotations

import dataclasses

import reverb

from builders.base import AgentBuilder, require_discrete_actions
from seed_agents import core
from seed_agents.agents.r2d2.acting import R2D2Policy
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.r2d2.learning import R2D2Learner
from seed_agents.agents.r2d2.networks import RecurrentQNetwork
from seed_agents.agents.r2d2.priorities import InitialPriority
from seed_agents.networks.torsos import check_torso_observation
from seed_agents.replay import (
    make_dataset,
    prioritized_table,
    unroll_signature,
)
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


@dataclasses.dataclass
class R2D2Builder(AgentBuilder):
    config: R2D2Config = dataclasses.field(default_factory=R2D2Config)

    #: Replay is the agent's memory of many hours of acting: worth a checkpoint.
    checkpoint_replay = True

    def check_num_envs(self, num_envs: int) -> None:
        if self.config.num_eval_envs >= num_envs:
            raise ValueError(
                f"R2D2 keeps num_eval_envs={self.config.num_eval_envs} of the {num_envs} "
                "environments for greedy evaluation, leaving none to learn from: run more "
                "environments or set num_eval_envs lower (--set num_eval_envs=0)."
            )

    @property
    def unroll_length(self) -> int:
        return self.config.unroll_length

    @property
    def sequence_period(self) -> int:
        return self.config.sequence_period

    def initial_priority(self) -> InitialPriority:
        return InitialPriority(self.config)

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        require_discrete_actions(env_spec, "R2D2")
        check_torso_observation(self.config.torso, env_spec.observations.shape)

    def make_networks(self, env_spec: EnvironmentSpec) -> RecurrentQNetwork:
        c = self.config
        return RecurrentQNetwork(
            env_spec.num_actions, env_spec.observations.shape, c.hidden_sizes, c.lstm_size,
            c.head_hidden_size, c.torso, c.precision,
        )

    def make_policy(
        self, networks: RecurrentQNetwork, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> R2D2Policy:
        c = self.config
        return R2D2Policy(
            networks, env_spec, num_envs=num_envs, num_evaluation_envs=c.num_eval_envs,
            eval_epsilon=c.eval_epsilon, epsilon_base=c.epsilon_base,
            epsilon_alpha=c.epsilon_alpha, evaluation=evaluation, seed=seed,
        )

    def make_replay_tables(
        self, env_spec: EnvironmentSpec, policy: core.Policy
    ) -> list[reverb.Table]:
        c = self.config
        signature = unroll_signature(
            env_spec, self.unroll_length, policy.extras_spec, policy.state_spec
        )
        return [prioritized_table(
            self.table, c.replay_size, c.priority_exponent, c.samples_per_insert,
            c.min_replay_size, signature=signature,
        )]

    def make_learner(
        self,
        networks: RecurrentQNetwork,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> R2D2Learner:
        c = self.config
        dataset = make_dataset(replay_address, self.table, c.batch_size, prefetch=c.prefetch)
        return R2D2Learner(networks, dataset, reverb.Client(replay_address), self.table, c,
                           counter=counter, logger=logger)
