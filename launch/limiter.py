"""The step limiter: watches a running program, logs its progress, and says when to stop.

Every backend runs one in its driver. It reads a status dict (env steps, episodes, mean
return over the last 100 episodes, learner steps) from wherever the backend keeps it (a
counter in process, the learner's control service elsewhere), and stops at the step
budget, the target return, the wall-time limit, or a failure the backend reports.

Next to it, where the program's components live (the in-process driver, the learner
node), the program's rates are measured: `program_rates` turns readings of their
cumulative counts into the "rates" row (console, `<logdir>/rates.csv`, TensorBoard), and
the status carries the rates since the start, for the run's summary.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from launch.experiment import Experiment, RunResult, client_credentials
from seed_agents.utils.counting import (
    Figures,
    RateReporter,
    RateTracker,
    delta,
    percentile_ms,
    ratio,
    share,
)
from seed_agents.utils.loggers import Logger

Status = Callable[[], dict[str, Any]]

# What the console's rates line shows; rates.csv and TensorBoard get every key.
_CONSOLE_RATES = (
    "env_steps_per_s", "inference_batches_per_s", "mean_batch_size", "round_trip_p50_ms",
    "round_trip_p99_ms", "inference_queue_wait_ms", "learner_steps_per_s", "replay_size",
    "replay_sample_wait_frac", "replay_insert_wait_frac",
)
# What a run's summary shows (see `RunResult.summary`), from the rates since the start.
SUMMARY_RATES = (
    "inference_batches_per_s", "mean_batch_size", "round_trip_p50_ms", "round_trip_p99_ms",
    "inference_queue_wait_ms", "learner_steps_per_s", "learner_samples_per_s",
    "replay_size", "replay_inserts_per_s", "replay_samples_per_s",
    "replay_sample_wait_frac", "replay_insert_wait_frac",
)


def program_status(counter: Any, episodes: dict[str, Any],
                   rates: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What every backend's status reports: episode statistics, the run's counts
    (env_steps and learner_steps always; eval_env_steps, learner_samples and the like when
    counted) and, when given, the program's rates since the start (`program_rates` keys;
    the counts win over the rates' own, which are up to a reading old)."""
    return {**(rates or {}), **episodes, "env_steps": 0, "learner_steps": 0,
            **counter.get_counts()}


def program_figures(counter: Any, inference: Any = None, replay_client: Any = None) -> dict:
    """One reading for `program_rates`: the counter's counts (the run's own counts start
    at 0, so a learner that has not stepped yet reads 0 steps/s, not NaN), the inference
    server's `inference_stats()` and the replay's `replay_figures()` when there are
    those."""
    from seed_agents.replay.stats import replay_figures

    figures = {"env_steps": 0, "learner_steps": 0, "learner_samples": 0,
               **counter.get_counts()}
    if inference is not None:
        figures.update(inference.inference_stats())
    if replay_client is not None:
        figures.update(replay_figures(replay_client))
    return figures


def program_rates(before: Figures, after: Figures) -> dict[str, float]:
    """The program's rates between two readings: where its time goes.

    A reading (`program_figures`) is the run's counter (env_steps, learner_steps,
    learner_samples), the inference server's `inference_stats()` and the replay's
    `replay_figures()`, each cumulative; a part the program lacks (no central inference
    in local mode) reads NaN.

    - env_steps_per_s, learner_steps_per_s, learner_samples_per_s: from the counter.
    - inference_batches_per_s, mean_batch_size (environments per policy call).
    - round_trip_p50_ms / _p99_ms: the server-side round trip of a request (a runner's
      batch of K environments), from entering the batcher's queue to its actions being
      ready; a runner's own view, transport included, is in its runner-<i>.csv.
    - inference_queue_wait_ms: mean time a request waited in the queue for its batch to
      close; inference_busy_frac: the share of wall time the batcher's thread ran the
      policy and the unroll writes: near 1, inference is the bottleneck, or the writes
      block on a full replay (then replay_insert_wait_frac says so too).
    - replay_size (items now), replay_inserts_per_s, replay_samples_per_s.
    - replay_sample_wait_frac: the share of wall time a sample request waited for data
      (the learner starved); replay_insert_wait_frac: the share an insert waited for
      room (acting throttled by the learner). Summed over tables (the built-in agents
      have one).

    A duration counts when it ends, so the shares (`share`) are capped at 1: a batch
    blocked behind a full replay for longer than a row's interval lands in one row.
    """
    seconds = after["time"] - before["time"]

    def per_s(key: str) -> float:
        return ratio(delta(before, after, key), seconds)

    return {
        "env_steps": after.get("env_steps", 0),
        "learner_steps": after.get("learner_steps", 0),
        "interval_s": seconds,
        "env_steps_per_s": per_s("env_steps"),
        "inference_batches_per_s": per_s("inference_batches"),
        "mean_batch_size": ratio(delta(before, after, "inference_items"),
                                 delta(before, after, "inference_batches")),
        "round_trip_p50_ms": percentile_ms(before, after, "inference_round_trip", 50),
        "round_trip_p99_ms": percentile_ms(before, after, "inference_round_trip", 99),
        "inference_queue_wait_ms": 1000 * ratio(delta(before, after, "inference_queue_wait_s"),
                                                delta(before, after, "inference_requests")),
        "inference_busy_frac": share(delta(before, after, "inference_process_s"), seconds),
        "learner_steps_per_s": per_s("learner_steps"),
        "learner_samples_per_s": per_s("learner_samples"),
        "replay_size": after.get("replay_size", math.nan),
        "replay_inserts_per_s": per_s("replay_inserts"),
        "replay_samples_per_s": per_s("replay_samples"),
        "replay_sample_wait_frac": share(1e-3 * delta(before, after, "replay_sample_wait_ms"),
                                         seconds),
        "replay_insert_wait_frac": share(1e-3 * delta(before, after, "replay_insert_wait_ms"),
                                         seconds),
    }


def rates_every_s(experiment: Experiment) -> float:
    """Seconds between rates rows: `log_every_s`, but at least 5 (shorter windows make
    noisy rates)."""
    return max(experiment.log_every_s, 5.0)


def start_program_rates(experiment: Experiment, read: Callable[[], Figures],
                        logdir: str | None, stream: TextIO | None = None) -> RateReporter:
    """A started `RateReporter` of `program_rates` over `read()`.

    Its row goes to the console (a line of the main keys on `stream`), and with a
    logdir to `<logdir>/rates.csv` and TensorBoard (`<logdir>/tb/rates`, step: env
    steps), every `rates_every_s(experiment)` seconds.
    """
    from seed_agents.utils.loggers import make_default_logger

    logger = make_default_logger("rates", logdir, print_every_s=0.0, stream=stream,
                                 append=experiment.resume, tensorboard=experiment.tensorboard,
                                 keys=_CONSOLE_RATES, redraw=False)
    return RateReporter(read, program_rates, logger,
                        log_every_s=rates_every_s(experiment)).start()


class StepLimiter:
    """Polls a program's status, logs the train rows and says when to stop.

    The wall time it logs and limits (`max_wall_s`) is the run's: a resumed run's status
    carries `resumed_wall_s`, the time of the run before the restart (its learner's
    checkpoint), which is added to this segment's. Only the first status's counts: a
    learner restarted within this segment (`max_node_restarts`) restores a checkpoint
    whose time this segment already counts. Rows are written once the program has
    answered a first status, so a resumed run's curves continue from its restored counts
    rather than from zero.
    """

    def __init__(self, experiment: Experiment, status: Status, logger: Logger,
                 poll_s: float = 0.05):
        self._experiment = experiment
        self._status = status
        self._logger = logger
        self._poll_s = poll_s

    def run(self, failure: Callable[[], str | None], wait: Callable[[float], Any]) -> RunResult:
        """Polls until done; `failure()` returns a reason to stop early, `wait(s)` sleeps.

        `wait` is the backend's stop event's `wait`, so a stop request ends a poll at once.
        """
        experiment = self._experiment
        start = time.monotonic()
        rate = RateTracker(window_s=5.0)
        next_log = start
        solved_steps = solved_wall = None
        status: dict[str, Any] = {}
        before_s: float | None = None
        while True:
            wait(self._poll_s)
            status = self._status() or status
            if before_s is None and status:
                before_s = float(status.get("resumed_wall_s", 0.0))
            now = time.monotonic()
            elapsed = (before_s or 0.0) + now - start
            env_steps = int(status.get("env_steps", 0))
            steps_per_s = rate.update(env_steps, now)
            # With evaluation environments (greedy, as in SEED) the target is judged on
            # their episodes: exploring episodes understate what the policy can do.
            judged = "eval_" if "eval_window_episodes" in status else ""
            if (solved_steps is None and experiment.target_return is not None
                    and status.get(f"{judged}window_episodes", 0) >= 100
                    and status[f"{judged}mean_return"] >= experiment.target_return):
                solved_steps, solved_wall = env_steps, elapsed
            reason = failure() or self._done(env_steps, solved_steps, elapsed)
            if (now >= next_log or reason) and status:
                self._logger.write({
                    "env_steps": env_steps,
                    "episodes": status.get("episodes", 0),
                    "mean_return": status.get("mean_return", float("nan")),
                    **{k: status[k] for k in ("eval_episodes", "eval_mean_return")
                       if k in status},
                    "steps_per_s": steps_per_s,
                    "learner_steps": int(status.get("learner_steps", 0)),
                    "wall_s": elapsed,
                    **{k: v for k, v in status.items() if k.startswith("restarts")},
                    # The learner's feature health where its agent logs it: a collapse
                    # (0: the network no longer looks at the observation) shows here.
                    **{k: status[k] for k in ("live_features",) if k in status},
                })
                next_log = now + experiment.log_every_s
            if reason:
                break
        wall = (before_s or 0.0) + time.monotonic() - start
        return RunResult(
            env_steps=env_steps,
            episodes=int(status.get("episodes", 0)),
            mean_return=float(status.get("mean_return", float("nan"))),
            eval_mean_return=status.get("eval_mean_return"),
            wall_s=wall,
            learner_steps=int(status.get("learner_steps", 0)),
            steps_per_s=env_steps / wall if wall > 0 else 0.0,
            logdir=experiment.logdir,
            solved_env_steps=solved_steps,
            solved_wall_s=solved_wall,
            stop_reason=reason,
            restarts=int(status.get("restarts", 0)),
            rates={k: float(status[k]) for k in SUMMARY_RATES if k in status},
        )

    def _done(self, env_steps: int, solved_steps: int | None, elapsed: float) -> str:
        experiment = self._experiment
        if env_steps >= experiment.max_env_steps:
            return f"step budget of {experiment.max_env_steps:,} env steps reached"
        if solved_steps is not None:
            return f"target return {experiment.target_return} reached"
        if experiment.max_wall_s is not None and elapsed >= experiment.max_wall_s:
            return f"wall-time limit of {experiment.max_wall_s:g} s reached"
        return ""


def limit_program(
    experiment: Experiment,
    control: Any,
    logdir: str | None,
    stream: Any,
    failure: Callable[[], str | None],
    wait: Callable[[float], Any],
    restarts: Callable[[], int] | None = None,
    poll_s: float = 0.1,
) -> RunResult:
    """The step limiter of every backend, reading the learner's control: its
    `LocalControl` in process, a `ControlClient` elsewhere.

    The train rows go to the console, and with a logdir to `train.csv` (appended to by a
    resumed run) and TensorBoard. A status call that fails (the learner is busy
    starting, or gone: `failure` reports that) counts as no news, so a slow answer never
    stops a program by itself.
    """
    import grpc

    from seed_agents.utils.loggers import make_default_logger

    logger = make_default_logger("train", logdir, total=experiment.max_env_steps,
                                 print_every_s=experiment.log_every_s, stream=stream,
                                 append=experiment.resume, tensorboard=experiment.tensorboard)

    def status() -> dict[str, Any]:
        try:
            counts = control.status()
        except grpc.RpcError:
            return {}
        return counts if restarts is None else {**counts, "restarts": restarts()}

    trackers = open_trackers(experiment, stream)
    result = None
    try:
        result = StepLimiter(experiment, status, logger, poll_s=poll_s).run(failure, wait)
        return result
    finally:
        logger.close()
        if trackers is not None:
            trackers.close(tracked_figures(result), failed=result is None)


def open_trackers(experiment: Experiment, stream: Any = None,
                  step_key: str = "env_steps") -> Any:
    """The run's experiment trackers (`Experiment.loggers`: W&B, MLflow), given its record
    (`run.json`) as their config, or None where it has none. Every backend's driver opens
    them once its `run.json` is written."""
    if not experiment.trackers:
        return None
    from launch.run_record import read_run_record
    from seed_agents.utils.trackers import RunTrackers

    config = read_run_record(experiment.logdir).to_json()
    return RunTrackers(experiment.trackers, experiment.logdir, config,
                       resume=experiment.resume, step_key=step_key, stream=stream)


def tracked_figures(result: Any) -> dict[str, Any]:
    """A run's final figures for its trackers: the result's numbers and stop reason
    (none for a run that ended by an error)."""
    if result is None:
        return {}
    return {key: value for key, value in dataclasses.asdict(result).items()
            if isinstance(value, int | float | str) and not isinstance(value, bool)}


def limit_remote_program(
    experiment: Experiment,
    control_address: Callable[[], str],
    logdir: str,
    stream: Any,
    restarts: Callable[[], int],
    failure: Callable[[], str | None],
    wait: Callable[[float], Any],
) -> RunResult:
    """`limit_program` over the learner's control service (a distributed backend's
    driver), at the address `control_address()` gives: a learner that the backend
    restarted elsewhere is followed to its new address."""
    control = _FollowingControl(control_address, experiment)
    try:
        return limit_program(experiment, control, logdir, stream, failure, wait, restarts)
    finally:
        control.close()


class _FollowingControl:
    """A `ControlClient` of whatever address the learner's control has now."""

    def __init__(self, address: Callable[[], str], experiment: Experiment):
        self._address = address
        self._experiment = experiment
        self._client: Any = None

    def status(self) -> dict[str, Any]:
        from launch.control import ControlClient

        address = self._address()
        if self._client is None or self._client.address != address:
            self.close()
            self._client = ControlClient(address, **client_credentials(self._experiment))
        return self._client.status()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
