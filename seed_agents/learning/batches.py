"""A learner's supply of batches: a dataset iterator that gives up instead of blocking.

`make_dataset` ends its iterator when no item arrives within its sampling timeout (an
empty queue, a rate limiter holding samples back), so that a learner loop regains control
to see a stop request. Every learner handles that the same way: start a new iterator and
report "no batch this time".

The batch before such an end may be partial: its items have left the table (a queue's
sample removes them), so they are carried into the next batch instead of dropped, and
every batch a learner gets has the full `batch_size` rows, in the order they were sampled.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import tensorflow as tf
import tree

_RETIRE_WAIT_S = 2.0
_TIMEOUTS = (StopIteration, tf.errors.OutOfRangeError, tf.errors.DeadlineExceededError)


def _rows(element: Any) -> int:
    return int(tree.flatten(element)[0].shape[0])


def _concat(first: Any, second: Any) -> Any:
    return tree.map_structure(lambda a, b: tf.concat([a, b], axis=0), first, second)


def _split(element: Any, rows: int) -> tuple[Any, Any]:
    return (tree.map_structure(lambda x: x[:rows], element),
            tree.map_structure(lambda x: x[rows:], element))


class Batches:
    """`next()` gives the dataset's next batch of `batch_size` rows, or None when sampling
    timed out.

    `batch_size` defaults to the dataset's static leading dimension; a dataset that may
    end on a partial batch (`make_dataset`'s) has none, and needs it given. Rows of a
    partial batch wait in `carried` (in sampling order) and go first into the next batch;
    while some wait, each batch is assembled by one concatenation (a copy of the batch:
    measured in `benchmarks/batch_carry.py`), where a full batch alone passes through
    untouched. Rows still carried at `close` are dropped: the program is stopping.
    """

    def __init__(self, dataset: tf.data.Dataset, batch_size: int | None = None):
        if batch_size is None:
            leading = {spec.shape[0] if spec.shape.rank else None
                       for spec in tree.flatten(dataset.element_spec)}
            if len(leading) != 1 or None in leading:
                raise ValueError(
                    "Batches needs batch_size: the dataset's elements have no static "
                    f"leading dimension ({sorted(map(str, leading))}).")
            batch_size = leading.pop()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
        self._dataset = dataset
        self._batch_size = batch_size
        self._iterator = iter(dataset)
        self._retiring: list[threading.Thread] = []
        self._carried: Any | None = None

    @property
    def carried(self) -> int:
        """Rows of a partial batch waiting for the next one."""
        return 0 if self._carried is None else _rows(self._carried)

    def next(self) -> Any | None:
        if self._iterator is None:
            raise RuntimeError("Batches.next after close.")
        while True:
            element = self._pull()
            if element is None:
                return None
            if self._carried is not None:
                element = _concat(self._carried, element)
                self._carried = None
            rows = _rows(element)
            if rows == self._batch_size:
                return element
            if rows > self._batch_size:
                element, self._carried = _split(element, self._batch_size)
                return element
            # A partial batch: the dataset ends next (its sampling timed out). Keep the
            # rows and pull on: the end comes at once and hands the caller its None.
            self._carried = element

    def _pull(self) -> Any | None:
        """The iterator's next element, or None (and a new iterator) at its end."""
        try:
            return next(self._iterator)
        except _TIMEOUTS:
            pass
        # Outside the `except`: its traceback (frames that hold the spent iterator) is
        # gone here, so the list handed to the thread holds the last reference.
        spent = [self._iterator]
        self._iterator = iter(self._dataset)
        self._retire(spent)
        return None

    def _retire(self, spent: list[Any]) -> None:
        """Destroys the spent iterator in `spent` (its only reference) on a thread.

        A Reverb dataset iterator's destructor waits for its workers' sample requests
        (0.26 s on a quiet machine, 2.4 s measured on two busy cores); on the learner's
        thread that wait delayed its stop past the bounds of `local_mp`'s stop once, and
        the run lost its final checkpoint. The destructor releases the GIL, so the
        learner steps on meanwhile.
        """
        self._retiring = [thread for thread in self._retiring if thread.is_alive()]
        thread = threading.Thread(target=spent.clear, name="spent-iterator", daemon=True)
        thread.start()
        self._retiring.append(thread)

    def close(self) -> None:
        """Retires the live iterator as a spent one, and waits up to `_RETIRE_WAIT_S` in
        all for them to be destroyed, closing their Reverb streams while the server is
        up: an iterator left to the garbage collector after its server stopped blocks the
        collection for seconds in its destructor (measured: 12-30 s). The live one is
        destroyed on a thread too: once the runners have stopped, a rate limiter (R2D2) or
        a queue nobody fills (V-trace) holds its sample requests back, and its destructor
        waited on the learner's thread until `local_mp` killed the learner, past its last
        save (the end of most Atari pieces; py-spy showed the learner here for 5 s). The wait is
        bounded because a stopping node's time is bounded; a destructor still running
        finishes on its daemon thread."""
        self._carried = None
        if self._iterator is not None:
            live, self._iterator = [self._iterator], None
            self._retire(live)
        deadline = time.monotonic() + _RETIRE_WAIT_S
        for thread in self._retiring:
            thread.join(max(deadline - time.monotonic(), 0.0))
        self._retiring = []
