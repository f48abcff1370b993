"""What agents that learn only from a recorded dataset share: transitions in a uniform
table, filled from the dataset (`seed_agents.datasets.replay.load_replay`), no acting.

`seed-agents train --agent bc|cql --dataset DATASET` runs them (`launch.backends.offline`): the
dataset's episodes go through `make_adder` (the inference server's n-step transition
adder) into `make_replay_tables`' table, the learner samples it, and evaluation episodes
act with `make_policy(evaluation=True)`.
"""

from __future__ import annotations

from typing import ClassVar

import reverb

from builders.base import AgentBuilder
from builders.transitions import TransitionReplay
from seed_agents import core
from seed_agents.configs.offline import OfflineConfig
from seed_agents.replay import offline_table, transition_signature
from seed_agents.specs import EnvironmentSpec


class OfflineAgentBuilder(TransitionReplay, AgentBuilder):
    """The replay half of an offline agent; subclasses add networks, policy, learner.

    A subclass is a dataclass with a `config` field that extends `OfflineConfig`.
    """

    #: The dataset is the replay: a resumed run loads it again.
    checkpoint_replay: ClassVar[bool] = False
    #: Runs learn from `Experiment.dataset`, never from runners.
    requires_dataset: ClassVar[bool] = True
    default_layout: ClassVar[tuple[int, int]] = (1, 1)

    config: OfflineConfig

    def make_replay_tables(
        self, env_spec: EnvironmentSpec, policy: core.Policy
    ) -> list[reverb.Table]:
        return [offline_table(self.table, self.config.replay_size,
                              transition_signature(env_spec, policy.extras_spec))]
