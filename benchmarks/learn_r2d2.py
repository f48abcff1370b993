"""How fast R2D2 learns CartPole-v1, with and without its velocities: env steps and
seconds until the mean greedy return of 100 episodes first reaches 475, over several seeds.

    python benchmarks/learn_r2d2.py --seeds 3

The masked task zeroes CartPole's two velocity entries (`mask:1,3:gym:CartPole-v1`): a
memoryless policy cannot tell which way the pole moves, so solving it needs the LSTM.
Returns are those of the evaluation environments (greedy, kept out of replay); env steps
count the training environments' steps (the evaluation environments' are counted apart,
as an evaluator's would be). Prints a line per run and, last, one
JSON line: `value` is the median env steps to solve the masked task (an unsolved seed
counts as never), `full_obs_solved` the seeds that solved the fully observed task. The
issue's target (1M env steps) is the baseline (`baseline_kind: "target"`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from builders.r2d2 import R2D2Builder
from launch.backends.inprocess import run_inprocess
from launch.commands.cli import parse_overrides
from launch.experiment import Experiment, RunResult
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.utils.reference import machine_report

TARGET = 475.0
TASKS = {"masked": "mask:1,3:gym:CartPole-v1", "full": "gym:CartPole-v1"}


def median_or_none(values: list[float]) -> float | None:
    median = statistics.median(values)
    return None if median == float("inf") else median


def solved_at(run: RunResult) -> tuple[float, float]:
    if run.solved_env_steps is None:
        return float("inf"), float("inf")
    return float(run.solved_env_steps), float(run.solved_wall_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1_000_000, help="budget per run")
    parser.add_argument("--max-wall-s", type=float, default=600.0, help="time limit per run")
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--envs-per-runner", type=int, default=16)
    parser.add_argument("--tasks", default="masked,full",
                        help=f"comma-separated, from {sorted(TASKS)}")
    parser.add_argument("--eval-envs", type=int, default=16,
                        help="greedy evaluation environments (of runners x envs-per-runner)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    config = parse_overrides(R2D2Config, [f"num_eval_envs={args.eval_envs}", *args.overrides])
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {sorted(TASKS)}")

    runs: dict[str, list[RunResult]] = {task: [] for task in tasks}
    for task in tasks:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            experiment = Experiment(
                builder=R2D2Builder(config),
                environment=TASKS[task],
                num_runners=args.runners,
                envs_per_runner=args.envs_per_runner,
                max_env_steps=args.steps,
                max_wall_s=args.max_wall_s,
                seed=seed,
                target_return=TARGET,
                log_every_s=10.0,
            )
            result = run_inprocess(experiment, stream=sys.stderr)
            runs[task].append(result)
            print(f"{task} seed {seed}: solved_at={result.solved_env_steps} env steps, "
                  f"{result.solved_wall_s} s, {result.steps_per_s:,.0f} steps/s, "
                  f"learner steps {result.learner_steps:,}, final greedy mean return "
                  f"{result.eval_mean_return}", flush=True)

    def summary(task: str) -> dict:
        results = runs.get(task, [])
        steps = [solved_at(r)[0] for r in results]
        walls = [solved_at(r)[1] for r in results]
        return {
            "solved": sum(r.solved_env_steps is not None for r in results),
            "steps": median_or_none(steps) if results else None,
            "wall_s": median_or_none(walls) if results else None,
            "per_seed": [None if s == float("inf") else int(s) for s in steps],
        }

    masked, full = summary("masked"), summary("full")
    value = masked["steps"]
    print(json.dumps({
        "bench": "learn_r2d2",
        "solved": masked["solved"],
        "seeds": args.seeds,
        "value": int(value) if value is not None else None,
        "unit": "env_steps",
        "wall_s": round(masked["wall_s"], 1) if masked["wall_s"] is not None else None,
        "full_obs_solved": full["solved"],
        "full_obs_value": int(full["steps"]) if full["steps"] is not None else None,
        "full_obs_wall_s": round(full["wall_s"], 1) if full["wall_s"] is not None else None,
        "masked_per_seed": masked["per_seed"],
        "full_obs_per_seed": full["per_seed"],
        "baseline": args.steps,
        "baseline_kind": "target",
        "ratio": round(value / args.steps, 3) if value is not None else None,
        # Where it ran: CPU, flags, TF, precision and one-second reference rates.
        "machine": machine_report(config.precision),
        "config": {"runners": args.runners, "envs_per_runner": args.envs_per_runner,
                   "eval_envs": args.eval_envs, "max_wall_s": args.max_wall_s,
                   "overrides": args.overrides},
    }))


if __name__ == "__main__":
    main()
