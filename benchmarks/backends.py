"""Training throughput of one V-trace experiment under each backend.

    python benchmarks/backends.py [--steps 300000] [--set batch_size=64 ...]

Runs the same `Experiment` (CartPole-v1, learning on) under `inprocess`, `local_mp` and
`ray` (a local Ray on 127.0.0.2), one after the other on the same cores. Reports each
backend's steady-state env steps/s, measured from its progress log between 20% of the
budget and the end (process start-up differs between backends and is reported apart as
`*_overall`, the budget over the whole wall time). The in-process figure is the baseline.
Defaults: 2 runners x 128 environments (fewer, larger messages: 4 x 64 measured 18-21K
env steps/s under local_mp here, 2 x 128 measured 21-24K), evaluation every 30 s.
Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from builders.vtrace import VTraceBuilder  # noqa: E402
from launch.backends.inprocess import run_inprocess  # noqa: E402
from launch.backends.local_mp import run_local_mp  # noqa: E402
from launch.commands.cli import parse_overrides  # noqa: E402
from launch.experiment import Experiment, RunResult  # noqa: E402
from seed_agents.agents.vtrace.config import VTraceConfig  # noqa: E402
from seed_agents.utils.reference import machine_report  # noqa: E402


def steady_rate(logdir: str, budget: int) -> float:
    """Env steps/s between the first progress row past 20% of the budget and the last."""
    with open(Path(logdir) / "train.csv") as f:
        rows = [(float(r["env_steps"]), float(r["wall_s"])) for r in csv.DictReader(f)]
    start = next((r for r in rows if r[0] >= 0.2 * budget), rows[0])
    end = rows[-1]
    return (end[0] - start[0]) / max(end[1] - start[1], 1e-9)


def run_backend(name: str, experiment: Experiment, root: str) -> tuple[float, RunResult]:
    logdir = os.path.join(root, name)
    experiment = dataclasses.replace(experiment, logdir=logdir)
    if name == "inprocess":
        result = run_inprocess(experiment)
    elif name == "local_mp":
        result = run_local_mp(experiment)
    else:
        from launch.backends.ray import run_ray

        result = run_ray(experiment, node_ip_address="127.0.0.2")
    rate = steady_rate(logdir, experiment.max_env_steps)
    print(f"{name}: {rate:,.0f} env steps/s steady, {result.steps_per_s:,.0f} overall, "
          f"{result.learner_steps} learner steps, mean return {result.mean_return:.1f}",
          flush=True)
    return rate, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=128)
    parser.add_argument("--backends", default="inprocess,local_mp,ray")
    parser.add_argument("--evaluate-every-s", type=float, default=30.0,
                        help="seconds between greedy evaluation episodes (in every "
                             "backend)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    config = parse_overrides(VTraceConfig, args.overrides)
    experiment = Experiment(
        builder=VTraceBuilder(config), environment="gym:CartPole-v1",
        num_runners=args.runners, envs_per_runner=args.envs_per_runner,
        max_env_steps=args.steps, log_every_s=0.5, evaluate_every_s=args.evaluate_every_s,
    )
    rates: dict[str, float] = {}
    overall: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as root:
        for name in args.backends.split(","):
            rates[name], result = run_backend(name, experiment, root)
            overall[name] = result.steps_per_s
    local_mp = rates.get("local_mp")
    print(json.dumps({
        "bench": "backends",
        "value": round(local_mp) if local_mp else None,
        "unit": "env_steps/s",
        **{name: round(rate) for name, rate in rates.items() if name != "local_mp"},
        **{f"{name}_overall": round(rate) for name, rate in overall.items()},
        "baseline": round(rates["inprocess"]) if "inprocess" in rates else None,
        "ratio": round(local_mp / rates["inprocess"], 2)
        if local_mp and "inprocess" in rates else None,
        "ray_vs_local_mp": round(rates["ray"] / local_mp, 2)
        if local_mp and "ray" in rates else None,
        # Where it ran: CPU, flags, TF, precision and one-second reference rates.
        "machine": machine_report(config.precision),
        "config": {"steps": args.steps, "runners": args.runners,
                   "envs_per_runner": args.envs_per_runner,
                   "evaluate_every_s": args.evaluate_every_s, "overrides": args.overrides},
    }))


if __name__ == "__main__":
    main()
