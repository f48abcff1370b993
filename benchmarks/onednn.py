"""TensorFlow's oneDNN kernels against its own (Eigen) on this CPU: the V-trace learner's
train step and the policy's batched step, each in a process of its own.

    python benchmarks/onednn.py [--preset atari_ppo_large] [--duration 120]

TF 2.14 turns oneDNN on by default only on CPUs with AVX-512 VNNI, bfloat16 or AMX;
`seed_agents` turns it on wherever it is imported before TF (`seed_agents/__init__.py`).
This measures what that buys on a CPU where TF would not: one child process with
`TF_ENABLE_ONEDNN_OPTS=0` (the baseline: TF's own kernels) and one with `=1`, one after
the other, each with the learner process's TF threads, running
`atari_phases.measure_learner_limit` (env steps/s the train step consumes, on random
unrolls) and `measure_inference_limit` (observations/s of the policy's step at the batch
`--inference-batch`). On a CPU where TF turns oneDNN on itself, `=0` turns it off, so the
ratio says what TF's default gives there too.

Prints one JSON line last: value = the learner's env steps/s with oneDNN, baseline =
without, ratio = value / baseline; the policy's rates both ways; the machine. Measures,
never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _child(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

    configure_tf_threads(None, LEARNER_INTER_OP_THREADS)  # as the learner's process has them
    from atari_phases import (
        ENV_ID,
        measure_inference_limit,
        measure_learner_limit,
        training_config,
    )

    from builders.vtrace import VTraceBuilder
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    config = training_config(args.preset, args.overrides)
    spec = make_environment_spec(make_environment(ENV_ID))
    builder = VTraceBuilder(config)
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=0)
    inference = measure_inference_limit(policy, args.inference_batch, args.warmup,
                                        args.duration / 4)
    learner = measure_learner_limit(config, spec, policy, args.warmup, args.duration)
    print(json.dumps({"learner_steps_per_s": learner["steps_per_s"],
                      "learner_cpu_ms_per_step": learner["cpu_ms_per_step"],
                      "inference_obs_per_s": inference["obs_per_s"],
                      "idle_cores": learner["idle_cores"]}))


def _measure(args: argparse.Namespace, onednn: str) -> dict[str, float]:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--preset", args.preset,
               "--duration", str(args.duration), "--warmup", str(args.warmup),
               "--inference-batch", str(args.inference_batch)]
    for override in args.overrides:
        command += ["--set", override]
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn}
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the child with TF_ENABLE_ONEDNN_OPTS={onednn} failed:\n"
                           + done.stderr[-3000:])
    print(f"TF_ENABLE_ONEDNN_OPTS={onednn}: {done.stdout.splitlines()[-1]} "
          f"({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    from atari_phases import add_config_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    # A learner step of atari_ppo_large takes 20-60 s on 2 AVX2 cores: a window of
    # several steps, timed from the first step begun in it to the last one finished.
    parser.add_argument("--duration", type=float, default=120.0,
                        help="seconds the learner is timed (the policy a quarter of it)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--inference-batch", type=int, default=64,
                        help="the policy's batch (learn_pong.py: 2 runners x 32)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    from seed_agents.utils.reference import machine_report

    without = _measure(args, "0")
    with_onednn = _measure(args, "1")
    value, baseline = with_onednn["learner_steps_per_s"], without["learner_steps_per_s"]
    print(json.dumps({
        "bench": "onednn_learner",
        "value": round(value, 1),
        "unit": "learner env steps/s with oneDNN",
        "baseline": round(baseline, 1),
        "baseline_is": "TF's own kernels (TF_ENABLE_ONEDNN_OPTS=0)",
        "ratio": round(value / baseline, 3),
        "preset": args.preset,
        "overrides": args.overrides,
        "learner_cpu_ms_per_step": {"onednn": round(with_onednn["learner_cpu_ms_per_step"], 3),
                                    "tf": round(without["learner_cpu_ms_per_step"], 3)},
        "inference_obs_per_s": {"onednn": round(with_onednn["inference_obs_per_s"]),
                                "tf": round(without["inference_obs_per_s"])},
        "inference_ratio": round(with_onednn["inference_obs_per_s"]
                                 / without["inference_obs_per_s"], 3),
        "inference_batch": args.inference_batch,
        "machine": machine_report(),
    }))


if __name__ == "__main__":
    main()
