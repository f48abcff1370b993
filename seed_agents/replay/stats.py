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
