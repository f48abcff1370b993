"""What tracing costs a learner's start: the V-trace learner's and the policy's first
steps as `seed_agents.utils.graph_functions` traces them (no AutoGraph, the gradient step
one function however often it is called) against `tf.function`'s defaults.

    python benchmarks/learner_start.py [--preset atari_ppo_large] [--env atari:Pong]

Every learner process traces its train step and its policy's step before its first step
(again at every restart), and every test that starts a learner waits for it. Two child
processes, one after the other, each with the learner process's TF threads: the baseline
with `tf.function`'s defaults (AutoGraph on, every call inlined: `graph_function` patched
before the agents are imported), then the toolkit's. Each times the policy's step at
`--batch` and the learner's train step on a batch of random unrolls
(`atari_phases.random_unroll_learner`): the first call traces, optimizes and runs the
graph, the next ones (the policy's one, the learner's `--steps`) only run it, so the first
minus the mean of the others is the start's cost.

Prints one JSON line last: value = the learner's and the policy's first calls minus a
later one's time as the toolkit traces them (seconds), baseline = the same with the defaults,
ratio = value / baseline (under 1: a faster start); each part both ways; the machine.
Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _child(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.autograph:
        # Through the module, not `import tensorflow` first: seed_agents must be imported
        # before TF for both children to run oneDNN's kernels alike.
        import seed_agents.utils.graph_functions as graph_functions

        def with_autograph(fn=None, *, input_signature=None, inline=True):
            if fn is None:
                return lambda f: with_autograph(f, input_signature=input_signature)
            return graph_functions.tf.function(fn, input_signature=input_signature,
                                              autograph=True)

        graph_functions.graph_function = with_autograph  # before any agent imports it
    from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

    configure_tf_threads(None, LEARNER_INTER_OP_THREADS)  # as the learner's process has them
    import numpy as np
    from atari_phases import random_unroll_learner, training_config

    from builders.vtrace import VTraceBuilder
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    config = training_config(args.preset, args.overrides)
    spec = make_environment_spec(make_environment(args.env))
    builder = VTraceBuilder(config)
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=0)
    observation = np.zeros((args.batch, *spec.observations.shape),
                           spec.observations.dtype)
    prev_action = np.zeros(args.batch, np.int32)
    state = policy.initial_state(args.batch)
    cpu = time.process_time()
    policy_times = [_timed(lambda: policy.step(observation, prev_action, state))
                    for _ in range(2)]
    learner = random_unroll_learner(config, spec, policy)
    learner_times = [_timed(learner.step) for _ in range(1 + args.steps)]
    print(json.dumps({"policy_first_s": policy_times[0], "policy_step_s": policy_times[1],
                      "learner_first_s": learner_times[0],
                      "learner_step_s": sum(learner_times[1:]) / args.steps,
                      "cpu_s": time.process_time() - cpu}))


def _measure(args: argparse.Namespace, autograph: bool) -> dict[str, float]:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--preset", args.preset,
               "--env", args.env, "--batch", str(args.batch), "--steps", str(args.steps)]
    command += ["--autograph"] if autograph else []
    for override in args.overrides:
        command += ["--set", override]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the child (autograph={autograph}) failed:\n"
                           + done.stderr[-3000:])
    print(f"autograph={autograph}: {done.stdout.splitlines()[-1]}", file=sys.stderr,
          flush=True)
    return json.loads(done.stdout.splitlines()[-1])


def _start_s(times: dict[str, float]) -> dict[str, float]:
    return {"learner": times["learner_first_s"] - times["learner_step_s"],
            "policy": times["policy_first_s"] - times["policy_step_s"]}


def main() -> None:
    from atari_phases import add_config_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--env", default="atari:Pong")
    parser.add_argument("--batch", type=int, default=64,
                        help="the policy's batch (learn_pong.py: 2 runners x 32)")
    parser.add_argument("--steps", type=int, default=3,
                        help="learner steps after the first, whose mean is a step's time")
    parser.add_argument("--autograph", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    from seed_agents.utils.reference import machine_report

    with_autograph = _measure(args, autograph=True)
    without = _measure(args, autograph=False)
    value, baseline = _start_s(without), _start_s(with_autograph)
    print(json.dumps({
        "bench": "learner_start",
        "value": round(value["learner"] + value["policy"], 2),
        "unit": "s of the learner's and the policy's first calls beyond a step",
        "baseline": round(baseline["learner"] + baseline["policy"], 2),
        "baseline_is": "tf.function's defaults (AutoGraph, calls inlined)",
        "ratio": round((value["learner"] + value["policy"])
                       / (baseline["learner"] + baseline["policy"]), 3),
        "learner_start_s": {"toolkit": round(value["learner"], 2),
                            "tf_function": round(baseline["learner"], 2)},
        "policy_start_s": {"toolkit": round(value["policy"], 2),
                           "tf_function": round(baseline["policy"], 2)},
        "learner_step_s": {"toolkit": round(without["learner_step_s"], 3),
                           "tf_function": round(with_autograph["learner_step_s"], 3)},
        "child_cpu_s": {"toolkit": round(without["cpu_s"], 1),
                        "tf_function": round(with_autograph["cpu_s"], 1)},
        "preset": args.preset, "env": args.env, "overrides": args.overrides,
        "machine": machine_report(),
    }))


if __name__ == "__main__":
    main()
