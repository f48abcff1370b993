"""Train V-trace on CartPole-v1 through central batched inference, in one process.

    python examples/cartpole_vtrace.py --steps 500000

The same `Experiment` runs under any backend; here everything is a thread of this process,
which is the easiest way to step through an agent in a debugger.
"""

from __future__ import annotations

import argparse

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.experiment import Experiment
from seed_agents.agents.vtrace.config import VTraceConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default="runs/cartpole_vtrace")
    args = parser.parse_args()

    experiment = Experiment(
        builder=VTraceBuilder(VTraceConfig()),
        environment="gym:CartPole-v1",
        num_runners=4,
        envs_per_runner=16,
        max_env_steps=args.steps,
        seed=args.seed,
        target_return=475.0,
        logdir=args.logdir,
    )
    result = run_inprocess(experiment)
    print(result.summary())


if __name__ == "__main__":
    main()
