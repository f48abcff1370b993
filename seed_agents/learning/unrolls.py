"""The learner shell of agents on fixed-length unrolls (on-policy queues, sequences).

A batch is a dict of [B, T+1, ...] tensors keyed by `seed_agents.replay.unrolls`' names
(OBSERVATION, ACTION, REWARD, DISCOUNT, STEP_TYPE, EXTRAS): row t's action was taken on
row t's observation, and the reward and discount of that transition sit in row t+1; a
LAST row ends an episode (its action is never executed), so a transition t -> t+1 exists
where row t is not LAST. Most losses read time-major [T+1, B] tensors: `time_major`.
"""

from __future__ import annotations

import tensorflow as tf

from seed_agents.learning.shell import BatchLearner


def time_major(x: tf.Tensor) -> tf.Tensor:
    """[B, T, ...] -> [T, B, ...]."""
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


class UnrollLearner(BatchLearner):
    """Subclass with `_train(unrolls) -> metrics` and `checkpoint_objects()`; see
    `BatchLearner` for what the shell does."""
