"""What agents that learn from n-step transitions share: table, adder, dataset, checks.

The base of any agent on transitions, discrete (DQN: set `discrete_actions = True`) or
continuous. SAC and D4PG differ in their networks, losses and exploration; their replay is the same
(Acme's): the central inference server's adder writes every step's n-step transition to
a uniform table whose `SampleToInsertRatio` limiter paces the learner against acting.
"""

from __future__ import annotations

import threading
from typing import ClassVar

import reverb
import tensorflow as tf

from builders.base import AgentBuilder, require_discrete_actions
from seed_agents import core
from seed_agents.configs.transitions import TransitionReplayConfig
from seed_agents.envs.action_scaling import is_canonical
from seed_agents.replay import (
    NStepTransitionAdder,
    UnrollWriter,
    make_dataset,
    rate_limited_table,
    row_spec,
    transition_signature,
)
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.specs import EnvironmentSpec


class TransitionReplay:
    """The adder and dataset of every agent that replays n-step transitions, online
    (SAC, D4PG) or offline (builders/offline.py): its `config` has `n_step`,
    `discount`, `batch_size` and `prefetch`, and its `table` names the table."""

    table: ClassVar[str] = "transitions"

    def make_adder(
        self,
        client: reverb.Client,
        num_slots: int,
        env_spec: EnvironmentSpec,
        policy: core.Policy,
        stop_event: threading.Event | None = None,
    ) -> NStepTransitionAdder:
        # A batch completes up to one transition per environment: let them all be in
        # flight before the writer waits for the server's confirmations.
        writer = UnrollWriter(client, self.table, max_in_flight_items=max(4, num_slots),
                              stop_event=stop_event)
        return NStepTransitionAdder(writer, num_slots, self.config.n_step,
                                    self.config.discount,
                                    row_spec(env_spec, policy.extras_spec))

    def make_dataset(self, replay_address: str) -> tf.data.Dataset:
        """Batches of transitions from the table, [B, ...] per field."""
        return make_dataset(replay_address, self.table, self.config.batch_size,
                            prefetch=self.config.prefetch)


class TransitionAgentBuilder(TransitionReplay, AgentBuilder):
    """The replay half of a transition agent; subclasses add networks, policy, learner.

    A subclass is a dataclass with a `config` field that extends `TransitionReplayConfig`,
    and says which actions it takes (`discrete_actions`).
    """

    #: A million transitions took hours of acting: worth a checkpoint.
    checkpoint_replay: ClassVar[bool] = True
    #: One runner of a few environments: a 100K-step budget then still gives each
    #: environment many episodes, and the evaluation environment enough of its own.
    default_layout: ClassVar[tuple[int, int]] = (1, 4)
    #: The agent's name in error messages.
    agent_name: ClassVar[str] = "This agent"
    #: Discrete actions (int32 ids: DQN) or continuous ones in [-1, 1] (SAC, D4PG).
    discrete_actions: ClassVar[bool] = False

    config: TransitionReplayConfig

    def check_num_envs(self, num_envs: int) -> None:
        if self.config.num_eval_envs >= num_envs:
            raise ValueError(
                f"{self.agent_name} keeps num_eval_envs={self.config.num_eval_envs} of the "
                f"{num_envs} environments for deterministic evaluation, leaving none to "
                "learn from: run more environments or set num_eval_envs lower "
                "(--set num_eval_envs=0).")

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        if self.discrete_actions:
            require_discrete_actions(env_spec, self.agent_name)
            return
        if env_spec.discrete_actions or not is_canonical(env_spec.actions):
            raise ValueError(
                f"{self.agent_name} acts with continuous actions in [-1, 1] (float32, shape "
                f"(d,)); this environment's action spec is {env_spec.actions!r}. Built-in "
                "ids (gym:, dmc:) rescale bounded actions for you; wrap your own "
                "environment in seed_agents.envs.action_scaling.CanonicalActions.")

    def make_replay_tables(
        self, env_spec: EnvironmentSpec, policy: core.Policy
    ) -> list[reverb.Table]:
        c = self.config
        return [rate_limited_table(
            self.table, c.replay_size, c.samples_per_insert, c.min_replay_size,
            c.error_buffer, signature=transition_signature(env_spec, policy.extras_spec))]

    def samples_per_insert(self, replay_address: str) -> SamplesPerInsert:
        """A reader of the table's observed samples per insert, for the learner's logs."""
        return SamplesPerInsert(reverb.Client(replay_address), self.table)
