"""`seed-agents eval`: greedy episodes of a trained agent, their statistics, a video.

The agent acts as its evaluator does during training: the builder's
`make_policy(..., evaluation=True)` on the restored networks, one environment, batch of
one, recurrent state carried through each episode. Statistics are over whole episodes
(an environment's own time limit ends an episode as in training).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from launch.commands import Agents, failing, quiet_tensorflow
from launch.restore import RestoredRun, load_run
from seed_agents.environment_loop import play_episode
from seed_agents.utils import storage
from seed_agents.utils.checkpointing import write_json_atomically

_EVALUATOR_SEED_OFFSET = 999_983  # the evaluator node's: the same episodes as in training


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """What `evaluate` measured, and where it wrote."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    environment: str
    checkpoint: str
    learner_step: int | None
    env_steps: int | None
    seed: int
    wall_s: float
    video: str | None = None
    video_episodes: int = 0

    def statistics(self, values: Sequence[float]) -> dict[str, float]:
        array = np.asarray(values, np.float64)
        return {"mean": float(array.mean()), "std": float(array.std()),
                "min": float(array.min()), "max": float(array.max())}

    def to_json(self, logdir: str) -> dict[str, Any]:
        return {
            "logdir": logdir,
            "checkpoint": self.checkpoint,
            "learner_step": self.learner_step,
            "env_steps": self.env_steps,
            "environment": self.environment,
            "policy": "greedy (make_policy(evaluation=True))",
            "seed": self.seed,
            "episodes": len(self.returns),
            "return": self.statistics(self.returns),
            "length": self.statistics(self.lengths),
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "video": self.video,
            "video_episodes": self.video_episodes,
            "wall_s": self.wall_s,
            "evaluated_at": datetime.datetime.now().isoformat(timespec="seconds"),
        }

    def summary(self) -> str:
        ret, length = self.statistics(self.returns), self.statistics(self.lengths)
        step = "" if self.learner_step is None else f"learner step {self.learner_step:,}, "
        steps = "" if self.env_steps is None else f"{self.env_steps:,} env steps"
        lines = [
            f"checkpoint: {self.checkpoint} ({step}{steps})".replace(" ()", ""),
            f"environment: {self.environment}, {len(self.returns)} greedy episodes "
            f"(seed {self.seed}), {self.wall_s:.1f} s",
            "return: " + ", ".join(f"{k} {v:.2f}" for k, v in ret.items()),
            "length: " + ", ".join(f"{k} {v:.1f}" for k, v in length.items()),
        ]
        if self.video:
            lines.append(f"video: {self.video} ({self.video_episodes} episode"
                         f"{'s' if self.video_episodes != 1 else ''})")
        return "\n".join(lines)


def evaluate(
    run: RestoredRun,
    episodes: int = 10,
    seed: int | None = None,
    video: str | None = None,
    video_episodes: int = 1,
    max_steps: int | None = None,
    stream: TextIO | None = None,
) -> EvalResult:
    """Plays `episodes` greedy episodes of `run`'s agent in its environment.

    Args:
      episodes: how many (>= 1).
      seed: seeds the environment (once; episodes follow on) and the policy; default:
        the run's seed + 999,983, as its evaluator node plays.
      video: an .mp4 path: the first `video_episodes` episodes are recorded there, at the
        environment's real-time frame rate.
      max_steps: cuts an episode after this many steps (for environments without a time
        limit); None: episodes end as the environment ends them.
      stream: one line per episode goes there, when given.

    Raises:
      ValueError: for a bad count, or `CannotRenderError` (a ValueError) when `video` is
        asked of an environment that cannot render; both before anything plays.
    """
    from seed_agents.actors import PolicyActor
    from seed_agents.envs import environment_factory
    from seed_agents.envs.rendering import make_rendering_environment
    from seed_agents.utils.video import VideoWriter

    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    if video is not None and not 1 <= video_episodes <= episodes:
        raise ValueError(f"video_episodes must be in [1, {episodes}], got {video_episodes}.")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}.")
    if seed is None:
        seed = int(run.record.experiment.get("seed", 0)) + _EVALUATOR_SEED_OFFSET
    frame = None
    fps = 0.0
    if video is not None:
        rendering = make_rendering_environment(run.environment, seed)
        env, frame, fps = rendering.environment, rendering.frame, rendering.fps
    else:
        env = environment_factory(run.environment)(seed)
    actor = PolicyActor(run.make_policy(evaluation=True, seed=seed), action_spec=run.spec.actions)
    writer = None
    returns: list[float] = []
    lengths: list[int] = []
    start = time.monotonic()
    try:
        for episode in range(episodes):
            if frame is not None and episode < video_episodes and writer is None:
                writer = VideoWriter(video, fps)
            recording = writer if episode < video_episodes else None
            episode_return, length = play_episode(env, actor, frame if recording else None,
                                                  recording, max_steps)
            returns.append(episode_return)
            lengths.append(length)
            if recording is not None and episode == video_episodes - 1:
                writer.close()
            if stream is not None:
                print(f"episode {episode + 1}/{episodes}: return {episode_return:.2f}, "
                      f"length {length}", file=stream, flush=True)
    finally:
        env.close()
        if writer is not None:
            writer.close()
    return EvalResult(
        returns=tuple(returns), lengths=tuple(lengths), environment=run.environment,
        checkpoint=run.checkpoint.path, learner_step=run.checkpoint.step,
        env_steps=run.checkpoint.counts.get("env_steps"), seed=seed,
        wall_s=time.monotonic() - start, video=video,
        video_episodes=min(video_episodes, episodes) if video else 0)


def default_results_path(run: RestoredRun) -> str:
    """`<logdir>/eval/<checkpoint>-<time>.json`: never an earlier evaluation's file."""
    name = os.path.basename(run.checkpoint.path)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(run.logdir, "eval", f"{name}-{stamp}.json")
    n = 1
    while storage.exists(path):
        n += 1
        path = os.path.join(run.logdir, "eval", f"{name}-{stamp}-{n}.json")
    return path


def write_results(result: EvalResult, run: RestoredRun, path: str) -> str:
    """Writes `result` as JSON to `path` (its directory made); returns the path."""
    storage.makedirs(os.path.dirname(path if storage.is_url(path) else os.path.abspath(path)))
    write_json_atomically(path, result.to_json(run.logdir))
    return path


@failing
def run_eval(args: argparse.Namespace, agents: Agents) -> int:
    quiet_tensorflow()
    run = load_run(args.logdir, agents, checkpoint=args.checkpoint, environment=args.env)
    result = evaluate(run, episodes=args.episodes, seed=args.seed, video=args.video,
                      video_episodes=args.video_episodes, max_steps=args.max_steps,
                      stream=sys.stdout)
    path = write_results(result, run, args.json or default_results_path(run))
    print(result.summary())
    print(f"results: {path}", flush=True)
    return 0
