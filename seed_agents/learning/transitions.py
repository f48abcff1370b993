"""The learner shell of agents on n-step transitions (DQN, SAC, D4PG, BC, CQL).

A batch is a dict of [B, ...] tensors keyed by `seed_agents.replay.transitions`'
names: OBSERVATION, ACTION, REWARD (the n-step discounted sum), DISCOUNT (gamma^n, 0
where the episode terminated), NEXT_OBSERVATION, EXTRAS. `TransitionAgentBuilder`'s table
is rate limited: pass its `samples_per_insert` reader to log the observed ratio.
"""

from __future__ import annotations

from seed_agents.learning.shell import BatchLearner


class TransitionLearner(BatchLearner):
    """Subclass with `_train(transitions) -> metrics` and `checkpoint_objects()`; see
    `BatchLearner` for what the shell does."""
