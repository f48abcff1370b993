"""What a Reverb server says about its tables, as cumulative figures for a `RateReporter`.

`client.server_info()` carries, per table, its size, the inserts and samples its rate
limiter let through since the server started, and how long the table's worker spent
blocked (`table_worker_time`, in ms):

- `waiting_for_inserts_ms`: a sample request was waiting and nothing could be sampled
  (an empty queue, or a rate limiter holding samples back): the learner starved for data;
- `waiting_for_sampling_ms`: an insert was waiting for room (a full queue, or a rate
  limiter holding inserts back): acting was throttled by the learner.

Those two are the replay's queue waits. Reading them is one small RPC (or an in-process
call), cheap at once a second and nothing the writers or the learner feel.
"""

from __future__ import annotations

from typing import Any


def replay_figures(client: Any) -> dict[str, float]:
    """Cumulative figures of every table of the server `client` talks to, summed.

    Keys: replay_size (items now), replay_inserts, replay_samples (completed since the
    server started), replay_sample_wait_ms and replay_insert_wait_ms (the worker times
    above). An empty dict when the server cannot be reached (e.g. it is shutting down):
    a missing reading, not an error.
    """
    try:
        tables = client.server_info(timeout=5).values()
    except Exception:  # noqa: BLE001 - any failure to ask is "no reading"
        return {}
    figures = dict.fromkeys(("replay_size", "replay_inserts", "replay_samples",
                             "replay_sample_wait_ms", "replay_insert_wait_ms"), 0)
    for info in tables:
        limiter = info.rate_limiter_info
        worker = info.table_worker_time
        figures["replay_size"] += int(info.current_size)
        figures["replay_inserts"] += int(limiter.insert_stats.completed)
        figures["replay_samples"] += int(limiter.sample_stats.completed)
        figures["replay_sample_wait_ms"] += int(worker.waiting_for_inserts_ms)
        figures["replay_insert_wait_ms"] += int(worker.waiting_for_sampling_ms)
    return figures


class SamplesPerInsert:
    """Items sampled per item inserted into one table since its server started: what a
    `SampleToInsertRatio` limiter holds near its target, as observed.

    `read()` asks the server at most every `every_s` seconds and otherwise returns the
    last reading, so a learner can put it in every step's metrics: the ratio and the two
    counts it came from, all NaN until the first reading (and kept when the server
    cannot be reached), so that a CSV log has the columns from its first row.
    """

    def __init__(self, client: Any, table: str, every_s: float = 1.0):
        self._client = client
        self._table = table
        self._every_s = every_s
        self._next = 0.0
        nan = float("nan")
        self._reading = {"samples_per_insert": nan, "replay_inserts": nan,
                         "replay_samples": nan}

    def read(self) -> dict[str, float]:
        import time

        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._every_s
            try:
                limiter = self._client.server_info(timeout=5)[self._table].rate_limiter_info
                inserts = int(limiter.insert_stats.completed)
                samples = int(limiter.sample_stats.completed)
            except Exception:  # noqa: BLE001 - no reading this time, not an error
                return self._reading
            self._reading = {
                "samples_per_insert": samples / inserts if inserts else float("nan"),
                "replay_inserts": inserts, "replay_samples": samples}
        return self._reading
