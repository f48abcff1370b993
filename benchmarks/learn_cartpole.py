"""How fast V-trace learns CartPole-v1: env steps and seconds until the mean return of
the last 100 episodes first reaches 475, over several seeds.

    python benchmarks/learn_cartpole.py --seeds 3

Prints a line per seed and, last, one JSON line. The issue's target (500K env steps)
is reported as the baseline (`baseline_kind: "target"`); `random_return` is a uniformly
random policy's mean return over 100 episodes, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.commands.cli import parse_overrides
from launch.experiment import Experiment
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.envs.random_play import random_return
from seed_agents.utils.reference import machine_report

TARGET = 475.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=500_000, help="budget per seed")
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--envs-per-runner", type=int, default=16)
    parser.add_argument("--transport", choices=["direct", "grpc"], default="direct",
                        help="runner threads calling the server, or runner processes on gRPC")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    config = parse_overrides(VTraceConfig, args.overrides)

    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        experiment = Experiment(
            builder=VTraceBuilder(config),
            environment="gym:CartPole-v1",
            num_runners=args.runners,
            envs_per_runner=args.envs_per_runner,
            max_env_steps=args.steps,
            seed=seed,
            target_return=TARGET,
            transport=args.transport,
            log_every_s=10.0,
        )
        result = run_inprocess(experiment, stream=sys.stderr)
        runs.append(result)
        print(f"seed {seed}: solved_at={result.solved_env_steps} env steps, "
              f"{result.solved_wall_s} s, {result.steps_per_s:,.0f} steps/s, "
              f"final mean return {result.mean_return:.1f}", flush=True)

    solved = [r for r in runs if r.solved_env_steps is not None]
    # Unsolved seeds count as never reaching the target (infinite steps), so the median
    # is only finite when most seeds solve.
    steps = sorted(r.solved_env_steps if r.solved_env_steps is not None else float("inf")
                   for r in runs)
    walls = sorted(r.solved_wall_s if r.solved_wall_s is not None else float("inf")
                   for r in runs)
    median_steps = statistics.median(steps)
    median_wall = statistics.median(walls)
    finite = median_steps != float("inf")
    print(json.dumps({
        "bench": "learn_cartpole",
        "solved": len(solved),
        "seeds": len(runs),
        "value": int(median_steps) if finite else None,
        "unit": "env_steps",
        "wall_s": round(median_wall, 1) if finite else None,
        "steps_per_s": round(statistics.median(r.steps_per_s for r in runs)),
        "baseline": args.steps,
        "baseline_kind": "target",
        "ratio": round(median_steps / args.steps, 3) if finite else None,
        "random_return": round(random_return("gym:CartPole-v1", 100, 0), 1),
        # Where it ran: CPU, flags, TF, precision and one-second reference rates.
        "machine": machine_report(config.precision),
        "config": {"transport": args.transport, "runners": args.runners,
                   "envs_per_runner": args.envs_per_runner, "overrides": args.overrides},
    }))


if __name__ == "__main__":
    main()
