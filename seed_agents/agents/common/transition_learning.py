"""The shell shared by learners that train on batches of n-step transitions (SAC, D4PG).

Everything but the math: batches from the rate-limited table, the step count (a variable,
so checkpoints carry it), counting and logging, and the observed samples per insert,
which shows whether the rate limiter holds learning and acting at the configured ratio.
A subclass provides the networks and `_train(data) -> metrics`, a `tf.function` over one
batch of transitions (`seed_agents.replay.transitions`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents import core
from seed_agents.agents.common.batches import Batches
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger, NoOpLogger


def clip_gradients(gradients: list[tf.Tensor],
                   max_norm: float | None) -> tuple[list[tf.Tensor], tf.Tensor]:
    """(`gradients` clipped to global norm `max_norm`, or as they are for None; their
    norm before clipping), for the metrics."""
    norm = tf.linalg.global_norm(gradients)
    if max_norm is not None:
        gradients, _ = tf.clip_by_global_norm(gradients, max_norm, use_norm=norm)
    return gradients, norm


def minimize(tape: tf.GradientTape, loss: tf.Tensor, variables: list[tf.Variable],
             optimizer: tf.keras.optimizers.Optimizer,
             max_norm: float | None) -> tf.Tensor:
    """One optimizer step on `loss` (recorded by `tape`) over `variables`, its gradients
    clipped to `max_norm` (None: not clipped); returns their norm, for the metrics."""
    gradients, norm = clip_gradients(tape.gradient(loss, variables), max_norm)
    optimizer.apply_gradients(zip(gradients, variables, strict=True))
    return norm


class TransitionLearner(core.Learner):
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
        self._batches = Batches(dataset)
        self._batch_size = batch_size
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._samples_per_insert = samples_per_insert
        self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_steps")

    @abc.abstractmethod
    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        """One update on a batch of transitions; returns scalar metrics."""

    @abc.abstractmethod
    def checkpoint_objects(self) -> dict[str, Any]:
        """Networks (targets included), optimizers and "step": see `core.Learner`."""

    @property
    def num_steps(self) -> int:
        return int(self._num_steps.numpy())

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
