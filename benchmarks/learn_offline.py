"""Offline learning: BC and CQL on a recorded CartPole-v1 dataset of mixed quality, or (with
`--task` a continuous one) BC, TD3+BC and IQL on a Control Suite dataset, each against the
dataset's own mean return.

    python benchmarks/learn_offline.py --seeds 3
    python benchmarks/learn_offline.py --task dmc:walker-walk --seeds 1 --teacher-steps 30000 \
        --episodes 200 --noise 0.3 --learner-steps 50000 --eval-episodes 10

Continuous (`--task dmc:<domain>-<task>` or `gym:<id>` with continuous actions): a SAC
teacher is trained for `--teacher-steps` env steps only (stopped early, at about half of
what it reaches at 100K, so that the data leave room to improve on; its deterministic
return is reported as `teacher_return`), or taken from `--teacher RUN` (a run of any
continuous agent on the task, stopped early). Per seed,
`--episodes` episodes of its deterministic action plus Gaussian noise of `--noise` are
recorded (`dataset_mean_return`), then BC, TD3+BC (`--agent td3 --preset td3_bc`) and IQL
each train `--learner-steps` steps and play `--eval-episodes` deterministic episodes.
`value` is IQL's mean; `ratio` is IQL / the dataset's mean return, `td3_bc_ratio` TD3+BC's
(the goal: both above BC's and >= 1.2).

CartPole (the default):

1. A V-trace teacher is trained in this run (as benchmarks/learn_cartpole.py does, until
   the mean return of its last 100 episodes reaches 475 or the budget ends), or taken
   from `--teacher RUN` (a logdir of `seed-agents train --agent vtrace --env
   gym:CartPole-v1 --target-return 475 --logdir RUN`). Its greedy return over 100
   episodes is reported (`teacher_return`).
2. Per seed: `seed-agents record` of 200 episodes of the teacher with epsilon 0.3
   (`dataset_mean_return`: the mean return of the recorded episodes), then BC and CQL
   each trained on it for `--learner-steps` steps, then 100 evaluation episodes each:
   CQL greedy (`value`), BC greedy (`bc_greedy`) and BC sampling from its learned
   action distribution (`bc_sampling`).

Greedy BC takes the teacher's most likely action, dropping the data's epsilon noise, so
it can beat the data; sampling BC reproduces the behaviour, noise included. The
target "BC matches the data within 10%" is about `bc_sampling` (reported as `bc`): it
shows that the data were cloned. The offline RL target is `ratio` = CQL's greedy return
/ the dataset's mean return > 1. The last line is the JSON; values are means over seeds
(and each seed's are in `per_seed`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from builders.bc import BCBuilder
from builders.cql import CQLBuilder
from builders.iql import IQLBuilder
from builders.sac import SACBuilder
from builders.td3 import TD3Builder
from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.offline import run_offline
from launch.commands.cli import AGENTS
from launch.commands.recording import record_episodes
from launch.experiment import Experiment
from launch.restore import load_run
from launch.run_record import read_run_record
from seed_agents.actors import PolicyActor
from seed_agents.agents.bc.config import BCConfig
from seed_agents.agents.cql.config import CQLConfig
from seed_agents.agents.iql.config import IQLConfig
from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.td3.config import TD3Config
from seed_agents.agents.td3.presets import TD3_BC
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.environment_loop import play_episode
from seed_agents.envs import environment_factory
from seed_agents.utils.overrides import parse_overrides
from seed_agents.utils.reference import machine_report

ENV = "gym:CartPole-v1"
EVAL_SEED = 777_000


def train_teacher(logdir: str, steps: int) -> None:
    experiment = Experiment(builder=VTraceBuilder(VTraceConfig()), environment=ENV,
                            num_runners=4, envs_per_runner=16, max_env_steps=steps,
                            target_return=475.0, log_every_s=10.0, logdir=logdir,
                            evaluate_every_s=None)
    result = run_inprocess(experiment, stream=sys.stderr)
    print(f"teacher: {result.stop_reason}, {result.env_steps:,} env steps, "
          f"{result.wall_s:.0f} s, mean return {result.mean_return:.1f}", flush=True)


def play(policy, spec, episodes: int, seed: int, task: str = ENV) -> float:
    """Mean return of `episodes` episodes of `policy` in one environment."""
    env = environment_factory(task)(seed)
    actor = PolicyActor(policy, action_spec=spec.actions)
    try:
        return float(np.mean([play_episode(env, actor)[0] for _ in range(episodes)]))
    finally:
        env.close()


def offline(builder, dataset: str, logdir: str, steps: int, seed: int,
            episodes: int, task: str = ENV) -> float:
    experiment = Experiment(builder=builder, environment=task, dataset=dataset,
                            max_learner_steps=steps, seed=seed, logdir=logdir,
                            evaluate_every_s=None, log_every_s=10.0)
    result = run_offline(experiment, stream=io.StringIO(), final_eval_episodes=episodes)
    print(f"  {type(builder).__name__}: {result.learner_steps:,} learner steps in "
          f"{result.wall_s:.0f} s, greedy return {result.eval_mean_return:.1f}", flush=True)
    return result.eval_mean_return


def train_continuous_teacher(task: str, logdir: str, steps: int) -> None:
    """SAC for `steps` env steps (stopped early on purpose: see the module's docstring)."""
    experiment = Experiment(builder=SACBuilder(SACConfig()), environment=task,
                            num_runners=1, envs_per_runner=4, max_env_steps=steps,
                            log_every_s=30.0, logdir=logdir, evaluate_every_s=None)
    result = run_inprocess(experiment, stream=sys.stderr)
    print(f"teacher: {result.stop_reason}, {result.env_steps:,} env steps, "
          f"{result.wall_s:.0f} s", flush=True)


def continuous(args: argparse.Namespace, workdir: str, start: float) -> None:
    """BC, TD3+BC and IQL on datasets of a stopped-early SAC teacher (see the docstring)."""
    teacher = args.teacher
    if teacher is None:
        teacher = os.path.join(workdir, "teacher")
        train_continuous_teacher(args.task, teacher, args.teacher_steps)
    # The builder's own networks, named: a run of benchmarks/learn_continuous.py records
    # its network factory (it keeps the networks to evaluate) as a custom one.
    builder = read_run_record(teacher).make_builder(AGENTS)
    run = load_run(teacher, AGENTS, builder=builder, network_factory=builder.make_networks)
    teacher_return = play(run.make_policy(evaluation=True, seed=EVAL_SEED), run.spec,
                          args.eval_episodes, EVAL_SEED, args.task)
    print(f"teacher deterministic return: {teacher_return:.1f}", flush=True)
    agents = {
        "bc": BCBuilder(BCConfig()),
        "td3_bc": TD3Builder(parse_overrides(TD3Config, TD3_BC)),
        "iql": IQLBuilder(IQLConfig()),
    }
    per_seed = []
    for seed in range(args.seeds):
        dataset = os.path.join(workdir, f"dataset-{seed}")
        recorded = record_episodes(run, dataset, args.episodes, noise=args.noise, seed=seed)
        print(f"seed {seed}: {recorded.summary()}", flush=True)
        figures = {"seed": seed, "dataset_mean_return": recorded.mean_return}
        for name, builder in agents.items():
            figures[name] = offline(builder, dataset, os.path.join(workdir, f"{name}-{seed}"),
                                    args.learner_steps, seed, args.eval_episodes, args.task)
        per_seed.append(figures)

    def mean(key: str) -> float:
        return float(statistics.mean(s[key] for s in per_seed))

    baseline = mean("dataset_mean_return")
    if baseline <= 0:
        raise ValueError(f"The dataset's mean return is {baseline}: no ratio to report.")
    print(json.dumps({
        "bench": "learn_offline_continuous",
        "value": round(mean("iql"), 1),
        "unit": "return",
        "task": args.task,
        "iql": round(mean("iql"), 1),
        "td3_bc": round(mean("td3_bc"), 1),
        "bc": round(mean("bc"), 1),
        "dataset_mean_return": round(baseline, 1),
        "baseline": round(baseline, 1),
        "baseline_kind": "the recorded episodes' mean return",
        "ratio": round(mean("iql") / baseline, 3),
        "td3_bc_ratio": round(mean("td3_bc") / baseline, 3),
        "bc_ratio": round(mean("bc") / baseline, 3),
        "teacher_return": round(teacher_return, 1),
        "per_seed": [{k: round(v, 1) if isinstance(v, float) else v for k, v in s.items()}
                     for s in per_seed],
        "config": {"episodes": args.episodes, "noise": args.noise,
                   "learner_steps": args.learner_steps, "eval_episodes": args.eval_episodes,
                   "teacher": args.teacher or f"SAC, {args.teacher_steps} env steps here",
                   "bc": "BCConfig()", "td3_bc": "--preset td3_bc", "iql": "IQLConfig()"},
        "wall_s": round(time.monotonic() - start, 1),
        "machine": machine_report("float32"),
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=ENV,
                        help="gym:CartPole-v1 (BC and CQL), or a continuous task such as "
                             "dmc:walker-walk (BC, TD3+BC and IQL)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=200, help="recorded per seed")
    parser.add_argument("--epsilon", type=float, default=0.3, help="discrete: uniform share")
    parser.add_argument("--noise", type=float, default=0.3,
                        help="continuous: Gaussian noise on the teacher's actions")
    parser.add_argument("--learner-steps", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--teacher", default=None,
                        help="a trained V-trace CartPole run, or a run of any continuous "
                             "agent on --task (default: train one here)")
    parser.add_argument("--teacher-steps", type=int, default=None,
                        help="the teacher's env steps (default: 500000 for CartPole, with a "
                             "target of 475; 30000 for a continuous task)")
    parser.add_argument("--workdir", default=None,
                        help="where runs and datasets go (default: a temporary directory)")
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="learn_offline-")
    if args.task != ENV:
        args.teacher_steps = args.teacher_steps or 30_000
        continuous(args, workdir, time.monotonic())
        return
    args.teacher_steps = args.teacher_steps or 500_000
    start = time.monotonic()
    teacher = args.teacher
    if teacher is None:
        teacher = os.path.join(workdir, "teacher")
        train_teacher(teacher, args.teacher_steps)
    run = load_run(teacher, AGENTS)
    teacher_return = play(run.make_policy(evaluation=True, seed=EVAL_SEED), run.spec,
                          args.eval_episodes, EVAL_SEED)
    print(f"teacher greedy return: {teacher_return:.1f}", flush=True)

    per_seed = []
    for seed in range(args.seeds):
        dataset = os.path.join(workdir, f"dataset-{seed}")
        recorded = record_episodes(run, dataset, args.episodes, epsilon=args.epsilon,
                                   seed=seed)
        print(f"seed {seed}: {recorded.summary()}", flush=True)
        bc_logdir = os.path.join(workdir, f"bc-{seed}")
        bc_greedy = offline(BCBuilder(BCConfig()), dataset, bc_logdir, args.learner_steps,
                            seed, args.eval_episodes)
        bc_run = load_run(bc_logdir, AGENTS)
        bc_sampling = play(bc_run.make_policy(evaluation=False, seed=seed), bc_run.spec,
                           args.eval_episodes, EVAL_SEED + 1 + seed)
        print(f"  BC sampling return {bc_sampling:.1f}", flush=True)
        cql = offline(CQLBuilder(CQLConfig()), dataset, os.path.join(workdir, f"cql-{seed}"),
                      args.learner_steps, seed, args.eval_episodes)
        per_seed.append({"seed": seed, "dataset_mean_return": recorded.mean_return,
                         "cql": cql, "bc_greedy": bc_greedy, "bc_sampling": bc_sampling,
                         "ratio": cql / recorded.mean_return,
                         "bc_sampling_ratio": bc_sampling / recorded.mean_return})

    def mean(key: str) -> float:
        return float(statistics.mean(s[key] for s in per_seed))

    baseline = mean("dataset_mean_return")
    if baseline <= 0:
        raise ValueError(f"The dataset's mean return is {baseline}: no ratio to report.")
    value = mean("cql")
    print(json.dumps({
        "bench": "learn_offline",
        "value": round(value, 1),
        "unit": "return",
        "bc": round(mean("bc_sampling"), 1),
        "bc_greedy": round(mean("bc_greedy"), 1),
        "bc_sampling": round(mean("bc_sampling"), 1),
        "dataset_mean_return": round(baseline, 1),
        "baseline": round(baseline, 1),
        "ratio": round(value / baseline, 3),
        "bc_ratio": round(mean("bc_sampling") / baseline, 3),
        "seeds_cql_beats_data": sum(s["ratio"] > 1 for s in per_seed),
        "seeds_bc_within_10pct": sum(abs(s["bc_sampling_ratio"] - 1) <= 0.1 for s in per_seed),
        "teacher_return": round(teacher_return, 1),
        "per_seed": [{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()}
                     for s in per_seed],
        "config": {"episodes": args.episodes, "epsilon": args.epsilon,
                   "learner_steps": args.learner_steps, "eval_episodes": args.eval_episodes,
                   "teacher": args.teacher or "trained in this run", "bc": "BCConfig()",
                   "cql": "CQLConfig()"},
        "wall_s": round(time.monotonic() - start, 1),
        "machine": machine_report(VTraceConfig().precision),
    }))


if __name__ == "__main__":
    main()
