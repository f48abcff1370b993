"""A dynamic batcher: many callers, one batched computation.

Callers hand in requests (`submit` blocks until the answer; `submit_nowait` gets it in a
callback) while one worker thread gathers them into a batch and runs `process` once for
all of them. A batch closes when it holds `max_batch_size` items, when every expected
caller has a request waiting, or `max_wait_s` after the worker started gathering it
(at its first request's arrival, or when the previous batch was done), whichever comes
first. The last rule is why a lone environment never waits forever (SEED's
full-batch rule deadlocks when fewer environments are active than the batch size); the
middle one is why a small program does not pay the timeout on every step.

Who is expected: at most `expected_requests()` callers (e.g. the connected runners) and,
with `active_window_s`, only callers that submitted within the last `active_window_s`
seconds. A caller is who names itself so (`caller=`), not a request: a runner that steps
its environments in two groups (one group's request in flight while the other steps) is
one caller with up to two requests, and a batch does not wait for the group that is
stepping. A caller that connected and went silent (or never spoke) then holds batches back
for at most that window, not forever: one idle runner must not make every other runner
wait `max_wait_s` on every step.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from seed_agents.utils.counting import LatencyHistogram


class BatcherClosedError(RuntimeError):
    """The batcher was closed while a request was waiting."""


Callback = Callable[[Any, "BaseException | None"], None]


class _Request:
    __slots__ = ("payload", "size", "caller", "result", "error", "done", "callback",
                 "submitted")

    def __init__(self, payload: Any, size: int, callback: Callback | None,
                 caller: Hashable | None = None):
        self.payload = payload
        self.size = size
        self.caller = caller
        self.submitted = time.monotonic()
        self.result: Any = None
        self.error: BaseException | None = None
        self.callback = callback
        self.done = threading.Event() if callback is None else None

    def finish(self) -> None:
        if self.callback is None:
            self.done.set()
        else:
            self.callback(self.result, self.error)


class DynamicBatcher:
    """Runs `process(payloads) -> results` (one result per payload) on a worker thread.

    `expected_requests()` tells how many callers may have a request in flight at most
    (e.g. the number of connected runners, each with one synchronous request); when that
    many are waiting, the batch closes at once. With `active_window_s`, callers name
    themselves (`caller=`) and only those seen within the window are expected (see the
    module docstring). An exception from `process` is raised in every caller of that
    batch; the batcher keeps serving later requests.

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
        active_window_s: float | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}.")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}.")
        if active_window_s is not None and active_window_s <= 0:
            raise ValueError(f"active_window_s must be > 0, got {active_window_s}.")
        self._process = process
        self._max_batch_size = max_batch_size
        self._max_wait_s = max_wait_s
        self._expected_requests = expected_requests
        self._active_window_s = active_window_s
        # caller -> when it last submitted, oldest first: expiring is popping the front.
        self._recent: OrderedDict[Hashable, float] = OrderedDict()
        self._pending: deque[_Request] = deque()
        self._pending_size = 0
        # Callers with a request waiting -> how many; requests without a caller count once
        # each. Their sum of keys is what "every expected caller waiting" compares.
        self._waiting_callers: dict[Hashable, int] = {}
        self._waiting_anonymous = 0
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

    def submit(self, payload: Any, size: int = 1, caller: Hashable | None = None) -> Any:
        """Blocks until the batch holding `payload` (of `size` items) is processed."""
        request = _Request(payload, size, None, caller)
        self._enqueue(request, caller)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def submit_nowait(
        self, payload: Any, size: int, callback: Callback, caller: Hashable | None = None
    ) -> None:
        """Queues `payload`; `callback(result, error)` runs on the worker thread once its
        batch is processed (error None on success), or with `BatcherClosedError` if the
        batcher closes first. It must be quick and must not raise: hand the result over
        to the caller's own thread or loop. Raises `BatcherClosedError` if closed now."""
        self._enqueue(_Request(payload, size, callback, caller), caller)

    def _enqueue(self, request: _Request, caller: Hashable | None) -> None:
        with self._cond:
            if self._closed:
                raise BatcherClosedError("The batcher is closed.")
            self._pending.append(request)
            self._pending_size += request.size
            if caller is None:
                self._waiting_anonymous += 1
            else:
                self._waiting_callers[caller] = self._waiting_callers.get(caller, 0) + 1
            if caller is not None and self._active_window_s is not None:
                self._recent[caller] = request.submitted
                self._recent.move_to_end(caller)
            # The worker needs waking only to start a batch's clock or to close it early;
            # otherwise its timed wait ends the batch. One wake-up per batch, not per caller.
            # Callers gone idle are expired by the worker, not here: a stale count only
            # delays an early close to the worker's own next check.
            waiting = self._waiting()
            if (len(self._pending) == 1 or self._pending_size >= self._max_batch_size
                    or (self._active_window_s is not None and waiting >= len(self._recent))
                    or (self._expected_requests is not None
                        and waiting >= self._expected_requests())):
                self._cond.notify()

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

    def expected_callers(self) -> int | None:
        """How many callers a batch waits for now (None: no early-close rule)."""
        with self._cond:
            return self._expected()

    def _expected(self) -> int | None:
        expected = None if self._expected_requests is None else self._expected_requests()
        if self._active_window_s is not None:
            horizon = time.monotonic() - self._active_window_s
            recent = self._recent
            while recent and next(iter(recent.values())) < horizon:
                recent.popitem(last=False)
            expected = len(recent) if expected is None else min(expected, len(recent))
        return expected

    def _closes_early(self) -> bool:
        """Full, or every expected caller waiting (the lock held)."""
        if self._pending_size >= self._max_batch_size:
            return True
        expected = self._expected()
        return expected is not None and self._waiting() >= expected

    def _waiting(self) -> int:
        """Distinct callers with a request waiting (the lock held)."""
        return len(self._waiting_callers) + self._waiting_anonymous

    def _take(self) -> _Request:
        """The oldest waiting request, out of the queue and the tallies (the lock held)."""
        request = self._pending.popleft()
        self._pending_size -= request.size
        if request.caller is None:
            self._waiting_anonymous -= 1
        else:
            left = self._waiting_callers[request.caller] - 1
            if left:
                self._waiting_callers[request.caller] = left
            else:
                del self._waiting_callers[request.caller]
        return request

    def _next_batch(self) -> list[_Request] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            # The clock starts when gathering starts: at the first request's arrival, or
            # as the previous batch ends when requests queued meanwhile (they get the
            # same chance as the first ones to be joined by the rest).
            deadline = time.monotonic() + self._max_wait_s
            while not self._closed and not self._closes_early():
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    break
                if self._recent:  # Wake when the longest-silent caller stops counting.
                    expiry = next(iter(self._recent.values())) + self._active_window_s
                    remaining = min(remaining, max(expiry - now, 0.0) + 1e-4)
                self._cond.wait(remaining)
            batch = [self._take()]
            size = batch[0].size
            while self._pending and size + self._pending[0].size <= self._max_batch_size:
                size += self._pending[0].size
                batch.append(self._take())
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
                request.finish()
        with self._cond:
            leftover = list(self._pending)
            self._pending.clear()
            self._pending_size = 0
            self._waiting_callers.clear()
            self._waiting_anonymous = 0
        for request in leftover:
            request.error = BatcherClosedError("The batcher was closed.")
            request.finish()
