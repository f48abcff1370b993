"""A learner's supply of batches: a dataset iterator that gives up instead of blocking.

`make_dataset` ends its iterator when no item arrives within its sampling timeout (an
empty queue, a rate limiter holding samples back), so that a learner loop regains control
to see a stop request. Every learner handles that the same way: start a new iterator and
report "no batch this time".
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_TIMEOUTS = (StopIteration, tf.errors.OutOfRangeError, tf.errors.DeadlineExceededError)


class Batches:
    """`next()` gives the dataset's next element, or None when sampling timed out."""

    def __init__(self, dataset: tf.data.Dataset):
        self._dataset = dataset
        self._iterator = iter(dataset)

    def next(self) -> Any | None:
        try:
            return next(self._iterator)
        except _TIMEOUTS:
            self._iterator = iter(self._dataset)
            return None
