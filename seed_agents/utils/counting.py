"""Shared step counters, rate tracking, latency histograms and the rate reporter.

In the SEED layout many threads advance the same notion of "progress" at once: every
runner thread adds env steps, the learner adds learner steps, the inference server adds
batches. A `Counter` is the one place those numbers meet, so it has to be exact under
concurrency (a lock, not best-effort increments) and cheap (a dict update per call).

Counters form a tree: a component gets a child counter with a prefix, and everything
it counts also shows up in the root, prefixed, so one `get_counts()` on the root is a
complete progress report (`learner_steps`, `actor_env_steps`, ...).

Components that are too hot for a lock per event (the inference batcher, a runner's
loop) keep plain cumulative numbers and a `LatencyHistogram` instead; a `RateReporter`
reads them every second or so, off the hot path, and turns readings into rates.
"""

from __future__ import annotations

import collections
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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


class RunClock:
    """A run's wall time across restarts: the time before the last restart (restored from
    a checkpoint) plus the time since this clock was made.

    A resumed run's time limit and its logged `wall_s` continue from the killed run's
    last checkpoint. The seconds between that checkpoint and the kill, and those of a
    restart before the clock is made, are not counted.
    """

    def __init__(self) -> None:
        self._start = time.monotonic()
        self.before_s = 0.0

    def elapsed_s(self) -> float:
        """Seconds of the run so far, earlier segments included."""
        return self.before_s + time.monotonic() - self._start

    def save(self) -> dict[str, float]:
        return {"wall_s": self.elapsed_s()}

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Counts `saved`'s time as before this clock's start."""
        self.before_s = float(saved["wall_s"])


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


class LatencyHistogram:
    """Counts durations into fixed log-spaced buckets, for percentiles over any interval.

    Why a histogram rather than a sample of recent values: its counts only grow, so the
    counts of an interval are the difference of two snapshots, and the p50/p99 of exactly
    the requests of that interval come out of it (a reservoir's window is "the last N
    requests", however long ago they were). It is a fixed list of ints: `record` costs a
    log and an increment, never an allocation that grows with the run.

    Buckets: `buckets_per_decade` per power of ten from `min_s` to `max_s` (20 per decade:
    each bucket is 12% wide, and a percentile interpolated inside one is within a few
    percent), plus one for everything at or below `min_s` and one for everything above
    `max_s`. One writer at a time: the owner records from one thread; `snapshot` may be
    called from any thread (it copies under the GIL, so it is at worst one record old).
    """

    def __init__(self, min_s: float = 1e-5, max_s: float = 100.0,
                 buckets_per_decade: int = 20) -> None:
        if not 0 < min_s < max_s:
            raise ValueError(f"need 0 < min_s < max_s, got {min_s} and {max_s}")
        if buckets_per_decade < 1:
            raise ValueError(f"buckets_per_decade must be >= 1, got {buckets_per_decade}")
        self._min_s = min_s
        self._per_log = buckets_per_decade / math.log(10.0)
        self._offset = math.log(min_s) * self._per_log - 1.0  # so that index >= 1 above min
        self._ratio = 10.0 ** (1.0 / buckets_per_decade)
        inner = math.ceil(round(math.log10(max_s / min_s) * buckets_per_decade, 9))
        self._last = inner + 1  # the overflow bucket
        self._max_s = min_s * self._ratio ** inner
        self._counts = [0] * (inner + 2)

    def record(self, seconds: float) -> None:
        """Counts one duration."""
        if seconds <= self._min_s:
            index = 0
        else:
            index = min(int(math.log(seconds) * self._per_log - self._offset), self._last)
        self._counts[index] += 1

    def snapshot(self) -> list[int]:
        """The cumulative counts per bucket (a copy)."""
        return list(self._counts)

    def percentile(self, q: float, since: Sequence[int] | None = None,
                   counts: Sequence[int] | None = None) -> float:
        """The `q`th percentile (0-100) in seconds; NaN when nothing was recorded.

        Of the durations recorded after the snapshot `since` up to the snapshot `counts`
        (default: now), interpolated geometrically inside the bucket it falls in. Values
        at or below `min_s` read as `min_s`, above `max_s` as `max_s`.
        """
        counts = self.snapshot() if counts is None else counts
        if since is not None:
            counts = [a - b for a, b in zip(counts, since, strict=True)]
        total = sum(counts)
        if total <= 0:
            return math.nan
        rank = min(max(q, 0.0), 100.0) / 100.0 * total
        seen = 0
        for index, count in enumerate(counts):
            if count > 0 and seen + count >= rank:
                if index == 0:
                    return self._min_s
                if index == self._last:
                    return self._max_s
                lower = self._min_s * self._ratio ** (index - 1)
                return lower * self._ratio ** ((rank - seen) / count)
            seen += count
        return self._max_s  # not reached: the counts sum to `total`


Figures = Mapping[str, Any]


def delta(before: Figures, after: Figures, key: str) -> float:
    """How much the cumulative figure `key` grew between two readings.

    A figure missing from `before` only had not started yet (a `Counter` has no key
    before its first increment): it grew from 0. NaN when `after` lacks it (the part
    that counts it is absent or could not be read) or it shrank (its source restarted:
    the interval says nothing then).
    """
    if key not in after:
        return math.nan
    grown = after[key] - before.get(key, 0)
    return grown if grown >= 0 else math.nan


def share(seconds: float, interval_s: float) -> float:
    """The share of `interval_s` that `seconds` of some activity took, at most 1.

    A duration is counted when it ends, so an activity that blocked across several
    intervals (a batch stuck behind a full replay) lands whole in the last one; the
    cap keeps that interval's share meaningful (the earlier ones read low).
    """
    return min(ratio(seconds, interval_s), 1.0)


def ratio(numerator: float, denominator: float) -> float:
    """`numerator / denominator`, or NaN when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else math.nan


_DEFAULT_HISTOGRAM = LatencyHistogram()


def percentile_ms(before: Figures, after: Figures, key: str, q: float) -> float:
    """The `q`th percentile, in ms, of the durations a default-bounded `LatencyHistogram`
    recorded between two readings of its snapshot under `key` (since it started when
    `before` lacks it, as for `delta`); NaN when `after` lacks it or nothing was recorded."""
    if key not in after:
        return math.nan
    return 1000.0 * _DEFAULT_HISTOGRAM.percentile(q, before.get(key), after[key])


class RateReporter:
    """Reads a component's cumulative figures on a thread and logs rates derived from them.

    Components keep plain cumulative counts where things happen (a batch served, a step
    taken), which costs them an addition; this is where those counts are read and turned
    into rates, off every hot path. Every `sample_every_s` it calls `read()` (a flat dict
    of counts, gauges and `LatencyHistogram` snapshots; a "time" key is added) and keeps:

    - `overall`: `derive(first, current)`, the rates since the reporter started (what a
      run's summary shows; refreshed at each reading, so at most `sample_every_s` old);
    - every `log_every_s`, a row `derive(last_logged, current)` written to `logger`.

    `derive(before, after)` returns a flat row of numbers and must return the same keys
    every time (NaN for what it cannot tell): the first row fixes a CSV file's header.
    `close()` writes a last row for the time since the previous one, so even a run
    shorter than `log_every_s` leaves one. A `read` or `derive` that raises is reported
    once on stderr and the reading skipped: measuring must never stop a program.
    """

    def __init__(
        self,
        read: Callable[[], Figures],
        derive: Callable[[Figures, Figures], dict[str, Any]],
        logger: Any = None,
        log_every_s: float = 5.0,
        sample_every_s: float = 1.0,
        name: str = "rates",
    ) -> None:
        if log_every_s <= 0 or sample_every_s <= 0:
            raise ValueError("log_every_s and sample_every_s must be positive, got "
                             f"{log_every_s} and {sample_every_s}")
        self._read = read
        self._derive = derive
        self._logger = logger
        self._log_every_s = log_every_s
        self._sample_every_s = min(sample_every_s, log_every_s)
        self._lock = threading.Lock()  # `close` and the thread both read and log.
        self._stop = threading.Event()
        self._first: Figures | None = None
        self._logged: Figures | None = None
        self._warned = False
        self.overall: dict[str, Any] = {}
        self.latest: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> RateReporter:
        """Takes the first reading and starts the thread; returns self."""
        self._sample(log=False)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._sample_every_s):
            self._sample(log=False)

    def _sample(self, log: bool) -> None:
        with self._lock:
            try:
                figures = {**self._read(), "time": time.monotonic()}
                if self._first is None:
                    self._first = self._logged = figures
                    return
                self.overall = self._derive(self._first, figures)
                since = figures["time"] - self._logged["time"]
                # The last row is skipped only when a row was just logged: rates over a
                # sliver of time are noise.
                due = since >= self._log_every_s or (log and (since >= 0.5 or not self.latest))
                if due and self._logger is not None:
                    self.latest = self._derive(self._logged, figures)
                    self._logged = figures
                    self._logger.write(self.latest)
            except Exception as error:  # noqa: BLE001 - reported, never raised
                if not self._warned:
                    self._warned = True
                    print(f"{self._thread.name}: reading figures failed: {error!r}",
                          file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stops the thread, logs the last interval and closes the logger. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)
        if self._first is not None:
            self._sample(log=True)
        if self._logger is not None:
            self._logger.close()
