"""The step limiter: watches a running program, logs its progress, and says when to stop.

Every backend runs one in its driver. It reads a status dict (env steps, episodes, mean
return over the last 100 episodes, learner steps) from wherever the backend keeps it (a
counter in process, the learner's control service elsewhere), and stops at the step
budget, the target return, the wall-time limit, or a failure the backend reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from launch.experiment import Experiment, RunResult
from seed_agents.utils.counting import RateTracker
from seed_agents.utils.loggers import Logger

Status = Callable[[], dict[str, Any]]


def program_status(counter: Any, episodes: dict[str, Any]) -> dict[str, Any]:
    """What every backend's status reports: episode statistics and the run's counts
    (env_steps and learner_steps always; eval_env_steps, learner_samples and the like when
    counted)."""
    return {**episodes, "env_steps": 0, "learner_steps": 0, **counter.get_counts()}


class StepLimiter:
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
        while True:
            wait(self._poll_s)
            now = time.monotonic()
            status = self._status() or status
            env_steps = int(status.get("env_steps", 0))
            steps_per_s = rate.update(env_steps, now)
            # With evaluation environments (greedy, as in SEED) the target is judged on
            # their episodes: exploring episodes understate what the policy can do.
            judged = "eval_" if "eval_window_episodes" in status else ""
            if (solved_steps is None and experiment.target_return is not None
                    and status.get(f"{judged}window_episodes", 0) >= 100
                    and status[f"{judged}mean_return"] >= experiment.target_return):
                solved_steps, solved_wall = env_steps, now - start
            reason = failure() or self._done(env_steps, solved_steps, now - start)
            if now >= next_log or reason:
                self._logger.write({
                    "env_steps": env_steps,
                    "episodes": status.get("episodes", 0),
                    "mean_return": status.get("mean_return", float("nan")),
                    **{k: status[k] for k in ("eval_episodes", "eval_mean_return")
                       if k in status},
                    "steps_per_s": steps_per_s,
                    "learner_steps": int(status.get("learner_steps", 0)),
                    "wall_s": now - start,
                    **{k: v for k, v in status.items() if k.startswith("restarts")},
                })
                next_log = now + experiment.log_every_s
            if reason:
                break
        wall = time.monotonic() - start
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


def limit_remote_program(
    experiment: Experiment,
    control_address: str,
    logdir: str,
    stream: Any,
    restarts: Callable[[], int],
    failure: Callable[[], str | None],
    wait: Callable[[float], Any],
) -> RunResult:
    """The step limiter of a distributed backend, reading the learner's control service.

    A status call that fails (the learner is busy starting, or gone: `failure` reports
    that) counts as no news, so a slow answer never stops a program by itself.
    """
    import grpc

    from launch.control import ControlClient
    from seed_agents.utils.loggers import make_default_logger

    control = ControlClient(control_address)
    logger = make_default_logger("train", logdir, total=experiment.max_env_steps,
                                 print_every_s=experiment.log_every_s, stream=stream)

    def status() -> dict[str, Any]:
        try:
            counts = control.status()
        except grpc.RpcError:
            return {}
        return {**counts, "restarts": restarts()}

    try:
        return StepLimiter(experiment, status, logger, poll_s=0.1).run(failure, wait)
    finally:
        logger.close()
        control.close()
