"""`seed-agents record`: a trained agent acting, its episodes written as a dataset.

The run is restored as `seed-agents eval` restores it (`launch.restore.load_run`), and
acts with its evaluation policy (`make_policy(evaluation=True)`: greedy, or the
deterministic action), optionally perturbed: with `epsilon`, that share of discrete
actions is uniform; with `noise`, Gaussian noise of that standard deviation is added to
continuous actions (clipped to [-1, 1]). The dataset stores the actions taken and the
policy's own extras (e.g. V-trace's logits, of the unperturbed policy); its
`spec.json` records the run, the checkpoint, epsilon, noise and seed as `behaviour`.
`--format rlds` writes the same episodes as an RLDS dataset instead (a TFDS directory,
`seed_agents.datasets.rlds`; our spec goes to its metadata.json).

`num_envs` environments act side by side (one policy call per step of all of them),
each playing a fixed share of the episodes, so that which episodes are kept does not
depend on how fast they end.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from typing import Any, TextIO

import numpy as np
import tree

from launch.commands import Agents, failing, quiet_tensorflow
from launch.restore import RestoredRun, load_run
from seed_agents.inference.protocol import FIRST, LAST, StepBatch

DATASET_FORMATS = ("episodes", "rlds")
"""`--format`: seed-agents' own dataset directory, or an RLDS (TFDS) one."""


@dataclasses.dataclass(frozen=True)
class RecordResult:
    """What `record_episodes` wrote."""

    path: str
    episodes: int
    steps: int
    mean_return: float
    wall_s: float

    def summary(self) -> str:
        return (f"dataset: {self.path}: {self.episodes} episodes, {self.steps:,} steps, "
                f"mean return {self.mean_return:.2f}, {self.wall_s:.1f} s")


def _explore(action: np.ndarray, spec: Any, epsilon: float, noise: float,
             rng: np.random.Generator) -> np.ndarray:
    if epsilon:
        random = rng.random(len(action)) < epsilon
        action = np.where(random, rng.integers(0, spec.num_values, len(action)),
                          action).astype(action.dtype)
    if noise:
        action = np.clip(action + noise * rng.standard_normal(action.shape), -1.0,
                         1.0).astype(action.dtype)
    return action


def record_episodes(
    run: RestoredRun,
    out: str,
    episodes: int,
    epsilon: float = 0.0,
    noise: float = 0.0,
    seed: int = 0,
    num_envs: int = 8,
    stream: TextIO | None = None,
    dataset_format: str = "episodes",
) -> RecordResult:
    """Plays `episodes` episodes of `run`'s agent and writes them to the new dataset
    directory `out` (see the module docstring): in seed-agents' own format, or with
    `dataset_format="rlds"` as an RLDS dataset (`seed_agents.datasets.rlds`).

    Raises:
      ValueError: before anything is written, for bad counts, epsilon with continuous
        actions or noise with discrete ones, an unknown format, or an `out` that is not
        new or empty.
    """
    from seed_agents.datasets import DatasetSpec, DatasetWriter, EpisodeRecorder
    from seed_agents.envs import environment_factory
    from seed_agents.inference.runner import EnvRunner
    from seed_agents.replay import unrolls
    from seed_agents.specs import is_discrete

    if dataset_format not in DATASET_FORMATS:
        raise ValueError(f"format must be one of {', '.join(DATASET_FORMATS)}, got "
                         f"{dataset_format!r}.")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
    discrete = is_discrete(run.spec.actions)
    if not 0.0 <= epsilon <= 1.0 or (epsilon and not discrete):
        raise ValueError(f"epsilon ({epsilon}) is the share of uniform actions in [0, 1], "
                         "for discrete actions (continuous ones take --noise).")
    if noise < 0 or (noise and discrete):
        raise ValueError(f"noise ({noise}) is the standard deviation of Gaussian noise "
                         "added to continuous actions, >= 0 (discrete ones take --epsilon).")
    num_envs = min(num_envs, episodes)
    # Made for our environments (their ids are the slots), greedy in every one of them.
    policy = run.builder.make_policy(run.networks, run.spec, evaluation=True, seed=seed,
                                     num_envs=num_envs)
    behaviour = {"source": "record", "logdir": run.logdir, "checkpoint": run.checkpoint.path,
                 "policy": "greedy (make_policy(evaluation=True))", "epsilon": epsilon,
                 "noise": noise, "seed": seed}
    spec = DatasetSpec.of(run.environment, run.spec, policy.extras_spec, behaviour)
    if dataset_format == "rlds":
        from seed_agents.datasets.rlds import RLDSWriter

        writer = RLDSWriter(out, spec)
    else:
        writer = DatasetWriter(out, spec)
    recorder = EpisodeRecorder(writer, num_envs)
    quota = np.full(num_envs, episodes // num_envs)
    quota[:episodes % num_envs] += 1
    done = np.zeros(num_envs, np.int64)
    returns = np.zeros(num_envs)
    finished: list[float] = []
    slots = np.arange(num_envs)
    state = policy.initial_state(num_envs)
    initial = policy.initial_state(num_envs)
    prev_action = np.zeros((num_envs, *run.spec.actions.shape), run.spec.actions.dtype)
    rng = np.random.default_rng(seed)
    stop = threading.Event()
    start = time.monotonic()

    def infer(batch: StepBatch) -> np.ndarray:
        nonlocal state
        first = batch.step_type == FIRST
        if first.any():
            prev_action[first] = 0
            state = tree.map_structure(lambda s, i: np.where(
                first.reshape(-1, *[1] * (s.ndim - 1)), i, s), state, initial)
        action, extras, state = policy.step(batch.observation, prev_action, state, slots)
        action = _explore(np.asarray(action), run.spec.actions, epsilon, noise, rng)
        keep = done < quota
        rows = {unrolls.OBSERVATION: batch.observation, unrolls.PREV_ACTION: prev_action,
                unrolls.REWARD: batch.reward, unrolls.DISCOUNT: batch.discount,
                unrolls.STEP_TYPE: batch.step_type, unrolls.ACTION: action,
                unrolls.EXTRAS: extras}
        if not keep.all():
            rows = tree.map_structure(lambda x: x[keep], rows)
        recorder.add(slots[keep], rows)
        returns[:] = np.where(first, 0.0, returns + batch.reward)
        ended = (batch.step_type == LAST) & keep
        for i in np.flatnonzero(ended):
            finished.append(float(returns[i]))
            if stream is not None:
                print(f"episode {len(finished)}/{episodes}: return {returns[i]:.2f}",
                      file=stream, flush=True)
        done[ended] += 1
        if (done >= quota).all():
            stop.set()
        prev_action[:] = action
        return action

    runner = EnvRunner(environment_factory(run.environment), num_envs, seed)
    try:
        runner.run(infer, stop)
    finally:
        runner.close()
        recorder.close()
    return RecordResult(out, writer.episodes, writer.spec.steps, float(np.mean(finished)),
                        time.monotonic() - start)


@failing
def run_record(args: argparse.Namespace, agents: Agents) -> int:
    quiet_tensorflow()
    run = load_run(args.logdir, agents, checkpoint=args.checkpoint)
    result = record_episodes(run, args.out, args.episodes, epsilon=args.epsilon,
                             noise=args.noise, seed=args.seed, num_envs=args.envs,
                             stream=sys.stdout, dataset_format=args.format)
    print(result.summary(), flush=True)
    return 0
