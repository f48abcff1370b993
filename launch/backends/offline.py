"""Offline training: a learner on a recorded dataset, with no runners.

`seed-agents train --agent bc --dataset DATASET --env gym:CartPole-v1` comes here. The
dataset's episodes fill the agent's replay tables through its own adder (the inference
server's: `seed_agents.datasets.replay.load_replay`, uniform tables that never remove),
the learner steps until `max_learner_steps` (or `max_wall_s`), and the learner's
networks play greedy evaluation episodes in the evaluation environment (seeded as the
evaluator node's) every `evaluate_every_s`, between learner steps: the policy reads the
learner's variables, nothing is copied. The run ends with `final_eval_episodes` greedy
episodes, whose mean is its result.

The run is a run like the others: `run.json`, `learner.csv`, `train.csv` (a row per
`log_every_s`: learner steps, evaluation returns), `evaluator.csv`, and learner
checkpoints, so `seed-agents eval/export/plot` and `--resume` work on it. It runs in
this process (the replay is loaded here); the program's other backends have no runners
to spread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from typing import Any, TextIO

import numpy as np

from launch.experiment import Experiment
from launch.limiter import open_trackers, tracked_figures
from launch.nodes import learner_checkpointer, make_learner_logger
from launch.run_record import write_run_record
from seed_agents.environment_loop import play_episode
from seed_agents.utils import storage
from seed_agents.utils.logdir_lock import hold_logdir
from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

EVALUATOR_SEED_OFFSET = 999_983  # the evaluator node's


@dataclasses.dataclass(frozen=True)
class OfflineResult:
    """What an offline run reports: its learning and its final greedy evaluation."""

    replay: str
    learner_steps: int
    wall_s: float
    stop_reason: str
    eval_returns: tuple[float, ...]
    eval_episodes: int
    logdir: str | None

    @property
    def eval_mean_return(self) -> float:
        """The mean return of the final evaluation episodes (NaN without any)."""
        return float(np.mean(self.eval_returns)) if self.eval_returns else float("nan")

    def summary(self) -> str:
        rate = self.learner_steps / self.wall_s if self.wall_s > 0 else 0.0
        return "\n".join([
            f"stopped: {self.stop_reason}",
            self.replay,
            f"learner steps: {self.learner_steps:,} ({rate:,.1f}/s)",
            f"evaluation episodes: {self.eval_episodes:,}",
            f"final evaluation: {len(self.eval_returns)} greedy episodes, mean return "
            f"{self.eval_mean_return:.1f}",
            f"wall time: {self.wall_s:.1f} s",
            f"logs: {self.logdir or '(terminal only)'}",
        ])


class _Evaluator:
    """Greedy episodes of the learner's own networks in one evaluation environment."""

    def __init__(self, experiment: Experiment, networks: Any, spec: Any):
        from seed_agents.actors import PolicyActor
        from seed_agents.envs import environment_factory
        from seed_agents.inference.server import EpisodeStats
        from seed_agents.utils.loggers import CSVLogger, NoOpLogger

        seed = experiment.seed + EVALUATOR_SEED_OFFSET
        policy = experiment.builder.make_policy(networks, spec, evaluation=True, seed=seed,
                                                num_envs=1)
        self._actor = PolicyActor(policy, action_spec=spec.actions)
        self._env = environment_factory(experiment.environment)(seed)
        self.stats = EpisodeStats()
        self._csv = (CSVLogger(experiment.logdir, "evaluator", append=experiment.resume)
                     if experiment.logdir else NoOpLogger())

    def episode(self, learner_steps: int) -> float:
        episode_return, length = play_episode(self._env, self._actor)
        self.stats.record(np.array([episode_return]), np.array([length]))
        self._csv.write({"learner_steps": learner_steps, "env_steps": 0,
                         "eval_return": episode_return})
        return episode_return

    def close(self) -> None:
        self._csv.close()
        self._env.close()


def run_offline(experiment: Experiment, stream: TextIO | None = None,
                final_eval_episodes: int = 10) -> OfflineResult:
    """Trains `experiment.builder`'s learner on `experiment.dataset` (see the module).

    Raises:
      ValueError: before anything is written, for a dataset that does not match the
        environment or the agent, an empty, truncated or corrupted one (naming the
        file), or checkpoints that `resume` does not expect.
    """
    if not experiment.dataset:
        raise ValueError("run_offline trains from a dataset: set Experiment.dataset.")
    if final_eval_episodes < 0:
        raise ValueError(f"final_eval_episodes must be >= 0, got {final_eval_episodes}.")
    stream = stream or sys.stdout
    experiment.check_checkpoints()
    from seed_agents.datasets import load_replay

    spec = experiment.environment_spec()
    configure_tf_threads(inter_op=LEARNER_INTER_OP_THREADS)
    import tensorflow as tf

    from seed_agents.utils.counting import Counter, RunClock
    from seed_agents.utils.loggers import make_default_logger

    tf.random.set_seed(experiment.seed)
    np.random.seed(experiment.seed)
    builder = experiment.builder
    networks = (experiment.network_factory or builder.make_networks)(spec)
    policy = builder.make_policy(networks, spec, evaluation=False, seed=experiment.seed,
                                 num_envs=1)
    environment = experiment.environment if isinstance(experiment.environment, str) else None
    replay = load_replay(experiment.dataset, builder, spec, policy, environment)
    evaluator = learner = logger = learner_logger = trackers = None
    # Taken once the dataset has passed its checks (a refused dataset leaves no logdir
    # behind), released once the learner's files are closed.
    held = contextlib.ExitStack()
    try:
        print(replay.summary(), file=stream, flush=True)
        held.enter_context(hold_logdir(experiment.logdir))
        if experiment.logdir:
            storage.makedirs(experiment.logdir)
            write_run_record(experiment, stream)
        counter, clock = Counter(), RunClock()
        evaluator = _Evaluator(experiment, networks, spec)
        learner_logger = make_learner_logger(experiment.logdir, experiment.resume,
                                             tensorboard=experiment.tensorboard)
        learner = builder.make_learner(networks, replay.address, counter, learner_logger)
        checkpointer = learner_checkpointer(
            experiment, learner, counter, replay.items, stream,
            {"eval_episodes": evaluator.stats, "clock": clock})
        logger = make_default_logger("train", experiment.logdir,
                                     total=experiment.max_learner_steps,
                                     print_every_s=experiment.log_every_s, stream=stream,
                                     append=experiment.resume,
                                     tensorboard=experiment.tensorboard,
                                     step_key="learner_steps")
        trackers = open_trackers(experiment, stream, step_key="learner_steps")
        reason = _train(experiment, learner, counter, clock, evaluator, logger, checkpointer)
        returns = [evaluator.episode(_learner_steps(counter))
                   for _ in range(final_eval_episodes)]
        if checkpointer is not None:
            checkpointer.save()
    except BaseException:
        if trackers is not None:
            trackers.close({}, failed=True)
        raise
    finally:
        for part in (logger, learner_logger, evaluator):
            if part is not None:
                part.close()
        try:
            if learner is not None:
                # Its dataset's streams close while the replay is still up: the
                # checkpointer keeps the learner alive past `del`, and an iterator the
                # garbage collector finds after its server stopped blocks that collection
                # in its destructor (76 s in a test's teardown, where the next
                # gc.collect found it).
                learner.close()
        finally:
            del learner
            try:
                replay.server.stop()  # also when closing the learner failed
            finally:
                held.close()
    wall = clock.elapsed_s()
    result = OfflineResult(replay=replay.summary(), learner_steps=_learner_steps(counter),
                           wall_s=wall, stop_reason=reason, eval_returns=tuple(returns),
                           eval_episodes=int(evaluator.stats.episodes),
                           logdir=experiment.logdir)
    if trackers is not None:
        trackers.close({**tracked_figures(result), "eval_mean_return": result.eval_mean_return})
    return result


def _learner_steps(counter: Any) -> int:
    return int(counter.get_counts().get("learner_steps", 0))


def _train(experiment: Experiment, learner: Any, counter: Any, clock: Any,
           evaluator: _Evaluator, logger: Any, checkpointer: Any) -> str:
    """Learner steps, evaluation episodes and progress rows until the budget; the reason
    it stopped."""
    now = time.monotonic()
    next_log = now + experiment.log_every_s
    every = experiment.evaluate_every_s
    next_eval = now + every if every else None
    while True:
        learner.step()
        if checkpointer is not None:
            checkpointer.maybe_save()
        steps = _learner_steps(counter)
        now = time.monotonic()
        if next_eval is not None and now >= next_eval:
            evaluator.episode(steps)
            next_eval = time.monotonic() + every
        reason = ""
        if steps >= experiment.max_learner_steps:
            reason = f"budget of {experiment.max_learner_steps:,} learner steps reached"
        elif experiment.max_wall_s is not None and clock.elapsed_s() >= experiment.max_wall_s:
            reason = f"wall-time limit of {experiment.max_wall_s:g} s reached"
        if now >= next_log or reason:
            status = evaluator.stats.summary("eval_")
            logger.write({"learner_steps": steps, "eval_episodes": status["eval_episodes"],
                          "eval_mean_return": status["eval_mean_return"],
                          "wall_s": clock.elapsed_s()})
            next_log = now + experiment.log_every_s
        if reason:
            return reason
