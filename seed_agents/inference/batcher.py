"""A dynamic batcher: many callers, one batched computation.

Callers block in `submit` while one worker thread gathers their requests into a batch and
runs `process` once for all of them. A batch closes when it holds `max_batch_size`
items, when every expected caller has a request waiting, or `max_wait_s` after its first
request arrived, whichever comes first. The last rule is why a lone environment never waits
forever (SEED's full-batch rule deadlocks when fewer environments are active than the batch
size); the middle one is why a small program does not pay the timeout on every step.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from seed_agents.utils.counting import LatencyHistogram


class BatcherClosedError(RuntimeError):
    """The batcher was closed while a request was waiting."""


class _Request:
    __slots__ = ("payload", "size", "result", "error", "done", "submitted")

    def __init__(self, payload: Any, size: int):
        self.payload = payload
        self.size = size
        self.submitted = time.monotonic()
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class DynamicBatcher:
    """Runs `process(payloads) -> results` (one result per payload) on a worker thread.

    `expected_requests()` tells how many callers may have a request in flight at most
    (e.g. the number of connected runners, each with one synchronous request); when that
    many are waiting, the batch closes at once. An exception from `process` is raised in
    every caller of that batch; the batcher keeps serving later requests.

    It counts what it does, for `stats()`: batches, items, requests, the seconds requests
    waited in the queue before their batch closed, the seconds `process` ran, and each
    request's round trip (submitted to answered) in a `LatencyHistogram`. Only the worker
    thread writes them, so they need no lock: a few additions per batch.
    """

    def __init__(
        self,
        process: Callable[[Sequence[Any]], Sequence[Any]],
        max_batch_size: int,
        max_wait_s: float = 0.002,
        expected_requests: Callable[[], int] | None = None,
        name: str = "dynamic-batcher",
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}.")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}.")
        self._process = process
        self._max_batch_size = max_batch_size
        self._max_wait_s = max_wait_s
        self._expected_requests = expected_requests
        self._pending: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.batches = 0
        self.items = 0
        self.requests = 0
        self.queue_wait_s = 0.0
        self.process_s = 0.0
        self.round_trip = LatencyHistogram()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, payload: Any, size: int = 1) -> Any:
        """Blocks until the batch holding `payload` (of `size` items) is processed."""
        request = _Request(payload, size)
        with self._cond:
            if self._closed:
                raise BatcherClosedError("The batcher is closed.")
            self._pending.append(request)
            self._cond.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def stats(self) -> dict[str, Any]:
        """Cumulative counts since start: batches, items, requests, queue_wait_s,
        process_s, and round_trip (a `LatencyHistogram` snapshot, in seconds)."""
        return {
            "batches": self.batches,
            "items": self.items,
            "requests": self.requests,
            "queue_wait_s": self.queue_wait_s,
            "process_s": self.process_s,
            "round_trip": self.round_trip.snapshot(),
        }

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the worker; requests still waiting fail with `BatcherClosedError`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _batch_ready(self, size: int, deadline: float) -> bool:
        if size >= self._max_batch_size or time.monotonic() >= deadline:
            return True
        return (
            self._expected_requests is not None
            and len(self._pending) >= self._expected_requests()
        )

    def _next_batch(self) -> list[_Request] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = time.monotonic() + self._max_wait_s
            while not self._closed:
                size = sum(r.size for r in self._pending)
                if self._batch_ready(size, deadline):
                    break
                self._cond.wait(max(deadline - time.monotonic(), 0.0))
            batch = [self._pending.popleft()]
            size = batch[0].size
            while self._pending and size + self._pending[0].size <= self._max_batch_size:
                size += self._pending[0].size
                batch.append(self._pending.popleft())
            return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                break
            start = time.monotonic()
            try:
                results = self._process([r.payload for r in batch])
                for request, result in zip(batch, results, strict=True):
                    request.result = result
            except BaseException as error:  # noqa: BLE001 - handed to every caller
                for request in batch:
                    request.error = error
            end = time.monotonic()
            self.batches += 1
            self.requests += len(batch)
            self.process_s += end - start
            items, waited, record = 0, 0.0, self.round_trip.record
            for request in batch:
                items += request.size
                waited += start - request.submitted
                record(end - request.submitted)
            self.items += items
            self.queue_wait_s += waited
            # Counted before anyone is released: a caller that returns sees its batch.
            for request in batch:
                request.done.set()
        with self._cond:
            leftover = list(self._pending)
            self._pending.clear()
        for request in leftover:
            request.error = BatcherClosedError("The batcher was closed.")
            request.done.set()
