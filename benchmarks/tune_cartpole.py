"""Does the search find a learning rate at least as good as the default? V-trace on
CartPole-v1: an 8-trial search over the learning rate (Optuna TPE, ASHA), then the best
setting and the default on seeds the search never saw.

    python benchmarks/tune_cartpole.py --parent runs/tune_cartpole

Both phases are `seed-agents train` commands (`--search`, then `--seeds --grid`), run in
`PARENT/search` and `PARENT/check`, so that `seed-agents compare` and `plot` read them.
`--resume` continues either phase where a stop left it. Prints the commands' output and,
last, one JSON line: the best setting's mean final return over the fresh seeds (`value`)
against the default's (`baseline`), with the search's trials.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LEARNING_RATE = "0.001"  # VTraceConfig's default


def _train(*args: str) -> None:
    command = [sys.executable, "-m", "launch.commands.cli", "train", "--agent", "vtrace",
               "--env", "gym:CartPole-v1", "--evaluate-every-s", "0", *args]
    print("$ seed-agents " + " ".join(command[3:]), flush=True)
    status = subprocess.run(command, cwd=ROOT).returncode
    if status:
        sys.exit(f"tune_cartpole: the command above failed (exit status {status})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", default="runs/tune_cartpole")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--space", default="log:1e-4,1e-2", help="the learning rate's space")
    parser.add_argument("--check-seeds", default="100-102",
                        help="seeds for best vs default, none of them the search's")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    search, check = os.path.join(args.parent, "search"), os.path.join(args.parent, "check")
    resume = ["--resume"] if args.resume and os.path.exists(search) else []
    _train("--steps", str(args.steps), "--search", f"learning_rate={args.space}",
           "--trials", str(args.trials), "--seed", "0", "--logdir", search, *resume)
    with open(os.path.join(search, "tune.json")) as f:
        tuned = json.load(f)
    (best,) = tuned["best"]["overrides"]
    best_rate = best.partition("=")[2]
    rates = [DEFAULT_LEARNING_RATE] + ([best_rate] if best_rate != DEFAULT_LEARNING_RATE else [])
    resume = ["--resume"] if args.resume and os.path.exists(check) else []
    _train("--steps", str(args.steps), "--seeds", args.check_seeds,
           "--grid", "learning_rate=" + ",".join(rates), "--logdir", check, *resume)

    from launch.studies.results import read_result
    from seed_agents.utils.reference import machine_report

    def finals(rate: str) -> list[float]:
        directory = os.path.join(check, f"learning_rate={rate}")
        return [read_result(os.path.join(directory, seed))["mean_return"]
                for seed in sorted(os.listdir(directory)) if seed.startswith("seed-")
                and os.path.isdir(os.path.join(directory, seed))]

    default, tuned_finals = finals(DEFAULT_LEARNING_RATE), finals(best_rate)
    value, baseline = statistics.mean(tuned_finals), statistics.mean(default)
    states = [t["state"] for t in tuned["trials"]]
    print(json.dumps({
        "bench": "tune_cartpole",
        "value": round(value, 2),
        "unit": "mean return at the budget, fresh seeds",
        "baseline": round(baseline, 2),
        "baseline_kind": f"default learning_rate={DEFAULT_LEARNING_RATE}, same seeds",
        "ratio": round(value / baseline, 3) if baseline else None,
        "best_learning_rate": best_rate,
        "best_trial_value": tuned["best"]["value"],
        "tuned_finals": [round(x, 2) for x in tuned_finals],
        "default_finals": [round(x, 2) for x in default],
        "check_seeds": args.check_seeds,
        "trials": len(states),
        "pruned": states.count("pruned"),
        "trial_rates": [t["params"]["learning_rate"] for t in tuned["trials"]],
        "trial_values": [t["value"] for t in tuned["trials"]],
        "steps_per_run": args.steps,
        "env": "gym:CartPole-v1",
        "machine": machine_report(),
    }), flush=True)


if __name__ == "__main__":
    main()
