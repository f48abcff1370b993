"""The builder protocol: how an agent turns into components.

A builder knows an agent's recipe (its networks, replay tables, policy, learner) and
nothing about processes: `launch/` decides where each component runs and hands the builder
the addresses and clients it needs. The generic parts (adder, inference server, actor) have
default implementations that an agent usually keeps, so a new agent writes four methods.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping
from typing import Any

import reverb

from seed_agents import core
from seed_agents.actors import PolicyActor, VariableClient
from seed_agents.inference.server import EpisodeStats, InferenceConfig, InferenceServer
from seed_agents.replay import unrolls
from seed_agents.replay.adder import Adder
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger


def require_discrete_actions(env_spec: EnvironmentSpec, agent: str) -> None:
    """Raises ValueError, naming the spec, unless actions are discrete."""
    if not env_spec.discrete_actions:
        raise ValueError(f"{agent} acts with discrete actions; this environment's action "
                         f"spec is {env_spec.actions!r}. For continuous control use "
                         "--agent sac or --agent d4pg.")


class AgentBuilder(abc.ABC):
    """One method per component; `launch` calls them in this order:

    make_networks -> make_policy -> make_replay_tables -> (Reverb server starts) ->
    make_learner -> make_adder -> make_inference_server | make_actor
    """

    #: The Reverb table that unrolls go to and the learner samples from.
    table: str = "unrolls"

    #: Whether a run checkpoints the replay beside the learner, so that a resumed run
    #: samples what the killed one had stored. Worth it for off-policy replay (a large
    #: prioritized table that took long to fill); not for an on-policy queue, whose
    #: items are stale for the restored policy anyway.
    checkpoint_replay: bool = True

    #: Whether the agent learns only from a recorded dataset (`Experiment.dataset`), with
    #: no runners (the offline agents: see builders/offline.py).
    requires_dataset: bool = False

    #: Whether the learner logs `live_features` (`seed_agents.networks.health`): the run's
    #: progress line then shows it from its first row, and a collapse is warned about.
    logs_feature_health: bool = False

    #: (runners, environments per runner) the command line uses when not told: many
    #: environments for on-policy agents on cheap tasks; see the continuous builders.
    default_layout: tuple[int, int] = (4, 16)

    def check_num_envs(self, num_envs: int) -> None:
        """Raises ValueError when the agent cannot run `num_envs` environments; an
        `Experiment` calls it when made, so bad settings fail before anything starts."""
        del num_envs  # any number suits an agent that does not override this

    def check_env_spec(self, env_spec: EnvironmentSpec) -> None:
        """Raises ValueError when the agent cannot act in an environment of this spec
        (e.g. discrete actions for a continuous-control agent); every backend calls it
        once it has the spec, before anything starts."""
        del env_spec  # an agent that does not override this takes any supported spec

    @property
    def unroll_length(self) -> int:
        """T: unrolls hold T+1 rows, the last shared with the next unroll. Builders whose
        adder writes unrolls (the default `make_adder`) define it."""
        raise NotImplementedError(f"{type(self).__name__} writes no unrolls.")

    @abc.abstractmethod
    def make_networks(self, env_spec: EnvironmentSpec) -> Any:
        """The agent's trainable networks for this environment."""

    @abc.abstractmethod
    def make_policy(
        self, networks: Any, env_spec: EnvironmentSpec, evaluation: bool = False,
        seed: int | None = None, num_envs: int = 1,
    ) -> core.Policy:
        """A batched policy over `networks` (greedy when `evaluation`) for `num_envs`
        environments with ids 0..num_envs-1."""

    @abc.abstractmethod
    def make_replay_tables(
        self, env_spec: EnvironmentSpec, policy: core.Policy
    ) -> list[reverb.Table]:
        """The Reverb tables, with signatures from the spec and the policy's extras/state."""

    @abc.abstractmethod
    def make_learner(
        self,
        networks: Any,
        replay_address: str,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ) -> core.Learner:
        """A learner that samples from the replay at `replay_address` and trains `networks`."""

    @property
    def sequence_period(self) -> int | None:
        """Rows between the starts of consecutive unrolls; None: `unroll_length` (unrolls
        overlap by their bootstrap row)."""
        return None

    def initial_priority(self) -> Callable[[Mapping[str, Any]], float] | None:
        """`unroll -> priority` it enters a prioritized table with; None: 1.0."""
        return None

    def make_adder(
        self,
        client: reverb.Client,
        num_slots: int,
        env_spec: EnvironmentSpec,
        policy: core.Policy,
        stop_event: threading.Event | None = None,
    ) -> Adder:
        """Assembles unrolls for `num_slots` environments and writes them to `table`."""
        writer = unrolls.UnrollWriter(client, self.table, stop_event=stop_event,
                                      priority_fn=self.initial_priority())
        return unrolls.UnrollAdder(
            writer,
            num_slots=num_slots,
            unroll_length=self.unroll_length,
            row_spec=unrolls.row_spec(env_spec, policy.extras_spec),
            state_spec=policy.state_spec,
            period=self.sequence_period,
        )

    def make_inference_server(
        self,
        policy: core.Policy,
        env_spec: EnvironmentSpec,
        adder: Adder | None,
        config: InferenceConfig | None = None,
        counter: Counter | None = None,
        stats: EpisodeStats | None = None,
    ) -> InferenceServer:
        """The central inference server: `policy` batched across runners."""
        return InferenceServer(policy, env_spec, adder, config, counter=counter, stats=stats)

    def make_actor(
        self,
        policy: core.Policy,
        adder: Adder | None = None,
        variable_source: core.VariableSource | None = None,
        variables: Any = None,
        update_period: int = 100,
        env_id: int = 0,
        action_spec: Any = None,
    ) -> core.Actor:
        """A local-inference actor; `variables` are its copy, refreshed from the source;
        `action_spec` is the environment's (default: discrete)."""
        client = None
        if variable_source is not None:
            client = VariableClient(variable_source, variables, update_period)
        return PolicyActor(policy, adder, client, env_id, action_spec)
