"""Shared step counters and a wall-clock rate tracker.

In the SEED layout many threads advance the same notion of "progress" at once: every
runner thread adds env steps, the learner adds learner steps, the inference server adds
batches. A `Counter` is the one place those numbers meet, so it has to be exact under
concurrency (a lock, not best-effort increments) and cheap (a dict update per call).

Counters form a tree: a component gets a child counter with a prefix, and everything
it counts also shows up in the root, prefixed, so one `get_counts()` on the root is a
complete progress report (`learner_steps`, `actor_env_steps`, ...).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping
from typing import Any

Number = int | float


class Counter:
    """A thread-safe bag of named, additive counts, optionally forwarding to a parent.

    Counts keep the type they were built from: adding only ints keeps an int (so loggers
    can print `env_steps=1,000,000` rather than `1e+06`); mixing in a float makes a float.
    """

    def __init__(self, parent: Counter | None = None, prefix: str = "") -> None:
        self._parent = parent
        self._prefix = prefix
        self._counts: dict[str, Number] = {}
        self._lock = threading.Lock()

    def _parent_key(self, key: str) -> str:
        # An empty prefix forwards keys unchanged rather than as "_key": a child with no
        # prefix is a pass-through view, not a namespace.
        return f"{self._prefix}_{key}" if self._prefix else key

    def increment(self, **counts: Number) -> dict[str, float]:
        """Adds `counts` to this counter (and its parent) and returns a snapshot.

        The snapshot is of this counter's own (unprefixed) counts, taken atomically with
        the update, so a caller can use it to decide e.g. "is it time to log?" without a
        second, racy `get_counts()`.
        """
        with self._lock:
            for key, value in counts.items():
                self._counts[key] = self._counts.get(key, 0) + value
            snapshot = dict(self._counts)
        # Forward outside our lock: the parent has its own lock, and never holding two
        # locks at once rules out lock-order deadlocks whatever the tree looks like.
        if self._parent is not None and counts:
            self._parent.increment(**{self._parent_key(k): v for k, v in counts.items()})
        return snapshot

    def get_counts(self) -> dict[str, float]:
        """Returns a copy of this counter's own counts."""
        with self._lock:
            return dict(self._counts)

    def save(self) -> dict[str, Any]:
        """Returns a checkpointable copy of this counter's own counts."""
        return {"counts": self.get_counts()}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replaces this counter's counts with those from `save()`.

        The parent is not touched: each counter in a tree is checkpointed on its own, and
        replaying a child's totals into a restored parent would count them twice.
        """
        counts = dict(state["counts"])
        with self._lock:
            self._counts = counts


class RateTracker:
    """Turns a monotonically increasing count into a per-second rate over a time window.

    The rate is measured from the newest sample at or before the start of the window
    (or the oldest sample, early on) to the current one, so it reflects recent
    throughput rather than the average since start-up, which would hide slow-downs.
    """

    def __init__(self, window_s: float = 10.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self._window_s = window_s
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._rate = 0.0

    @property
    def rate(self) -> float:
        """The rate computed by the last `update`, in counts per second."""
        return self._rate

    def update(self, count: float, now: float | None = None) -> float:
        """Records `count` at time `now` (default `time.monotonic()`); returns the rate."""
        now = time.monotonic() if now is None else now
        if self._samples and count < self._samples[-1][1]:
            # The count went backwards (e.g. a restore from an older checkpoint): the old
            # samples describe a different history, so start measuring afresh.
            self._samples.clear()
        self._samples.append((now, count))
        # Drop a baseline only when the next sample is also old enough to serve as one,
        # so the window always spans at least `window_s` once enough time has passed.
        horizon = now - self._window_s
        while len(self._samples) > 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()
        t0, c0 = self._samples[0]
        elapsed = now - t0
        self._rate = (count - c0) / elapsed if elapsed > 0 else 0.0
        return self._rate
