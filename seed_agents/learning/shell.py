"""The shell of a learner that trains on batches from a Reverb table: everything but the math.

Batches that give up instead of blocking (so the loop sees its stop event), the step count
(a variable, so checkpoints carry it), counting and logging, and, for a rate-limited
table, the observed samples per insert, which shows whether the limiter holds learning
and acting at the configured ratio. `TransitionLearner` and `UnrollLearner` name what the
batches hold; a subclass provides `_train(data) -> metrics` (a `tf.function` over one
batch) and `checkpoint_objects()`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents import core
from seed_agents.learning.batches import Batches
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger, NoOpLogger


class BatchLearner(core.Learner):
    """One `_train` call per batch; `step` returns {} when no batch came in time (see
    `Batches`), so the caller's loop sees its stop event.

    `networks` is the `tf.Module` the policy reads: `get_variables` hands out all of its
    variables (an evaluator or a local actor builds the same module and assigns them in
    order).
    """

    def __init__(
        self,
        networks: tf.Module,
        dataset: tf.data.Dataset,
        batch_size: int,
        counter: Counter | None = None,
        logger: Logger | None = None,
        samples_per_insert: SamplesPerInsert | None = None,
    ):
        self._networks = networks
        self._batches = Batches(dataset, batch_size)
        self._batch_size = batch_size
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._samples_per_insert = samples_per_insert
        self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_steps")

    @abc.abstractmethod
    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        """One update on a batch (the dataset's `data`); returns scalar metrics."""

    @abc.abstractmethod
    def checkpoint_objects(self) -> dict[str, Any]:
        """Networks (targets included), optimizers and "step": see `core.Learner`."""

    @property
    def num_steps(self) -> int:
        return int(self._num_steps.numpy())

    @property
    def step_variable(self) -> tf.Variable:
        """The step count as a variable: what `checkpoint_objects` saves as "step", and
        what a `tf.function` reads for this step's number (0 at the first `_train`: the
        shell counts a step after it)."""
        return self._num_steps

    def every(self, period: int) -> tf.Tensor:
        """True on steps 0, period, 2 period, ...: a delayed update's condition inside
        `_train` (TD3's actor and targets with `tf.cond(self.every(2), ...)`)."""
        return tf.equal(self._num_steps % _checked_period(period), 0)

    def completes(self, period: int) -> tf.Tensor:
        """True on steps period - 1, 2 period - 1, ...: the step that completes each
        period, for an update after every `period` steps (DQN's and CQL's target copy
        with `tf.cond(self.completes(period), ...)`)."""
        return tf.equal((self._num_steps + 1) % _checked_period(period), 0)

    def close(self) -> None:
        self._batches.close()

    def step(self) -> dict[str, float]:
        sample = self._batches.next()
        if sample is None:
            return {}
        metrics = {k: float(v) for k, v in self._train(sample.data).items()}
        self._num_steps.assign_add(1)
        if self._samples_per_insert is not None:
            metrics.update(self._samples_per_insert.read())
        counts = self._counter.increment(learner_steps=1, learner_samples=self._batch_size)
        self._logger.write({**counts, **metrics})
        return metrics

    def get_variables(self, names: Sequence[str] = ("policy",)) -> list[list[np.ndarray]]:
        return [[v.numpy() for v in self._networks.variables] for _ in names]


def _checked_period(period: int) -> int:
    if period < 1:
        raise ValueError(f"period must be >= 1, got {period}.")
    return period
