"""A SEED cluster simulated on one machine: 1, 8 and 32 Pong runner processes of a few
environments each, every stream behind a simulated network, served by one central
inference service; how many runner machines one learner core can serve.

    python benchmarks/cluster_sim.py [--runners 1,8,32] [--envs-per-runner 4]
                                     [--delay-ms 0.25] [--bandwidth-mbit 1000]
                                     [--runner-cores 4] [--learner-cores 16]

Phases, one after the other, each counted over `--duration` seconds after a warm-up
(`atari_phases.py` measures them, as for `atari_throughput.py`):
  * env_limit: one process per core stepping Pong with random actions: a core's rate;
  * learner: the V-trace learner's train step alone (`--preset`), its CPU per env step;
  * cluster R, for each `--runners` entry: R runner processes (the real `EnvRunner`
    and gRPC client; not pinned: there are more of them than cores) of
    `--envs-per-runner` environments each, every stream `--delay-ms` away each way through
    a link of `--bandwidth-mbit` (a harness in the runner: this kernel has no netem),
    against one inference service with the Nature CNN policy. Each reports frames/s,
    payload bytes per frame each way (counted by the service), the round trip, and the CPU
    per env step of the runners and of the serving process (gRPC, decoding, batching,
    frame stacking, the policy);
  * no_network: the largest R again without the simulated network (the baseline).

From the largest R (the most cluster-like: many small streams), per env step: `serving`
(the serving process's CPU), `learning` (the learner's), `runner` (a runner's). Then:
  * serving_share = serving / (serving + learning): the learner machine's CPU that goes to
    serving the runners rather than learning;
  * runner_machines_per_learner_core: the env steps/s one core of serving handles, over
    what one runner machine of `--runner-cores` cores produces (runner_cores / runner);
  * the projection for a learner machine of `--learner-cores` cores doing both: env
    steps/s = cores / (serving + learning), the runner machines that takes, and the
    network it receives and sends (frames/s x bytes per frame).
These are CPU-time figures: on a machine shared with other programs the rates fall but
the CPU per step mostly holds. Prints one JSON line last: value = frames/s at the largest
R, baseline = the same without the simulated network, ratio = value / baseline. Measures,
never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from atari_phases import (
    ACTION_REPEAT,
    ENV_ID,
    json_round,
    measure_acting,
    measure_env_limit,
    measure_learner_limit,
    training_config,
)


def _runner_counts(text: str) -> list[int]:
    counts = [int(item) for item in text.split(",") if item.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--runners takes positive counts, got {text!r}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=_runner_counts, default=[1, 8, 32],
                        help="runner processes of each cluster phase, comma-separated")
    parser.add_argument("--envs-per-runner", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=0.25,
                        help="one-way delay of every stream (a datacenter hop: ~0.25 ms)")
    parser.add_argument("--bandwidth-mbit", type=float, default=1000.0,
                        help="each runner's link (0: unlimited)")
    parser.add_argument("--runner-cores", type=int, default=4,
                        help="vCPUs of a projected runner machine")
    parser.add_argument("--learner-cores", type=int, default=16,
                        help="vCPUs of the projected learner machine")
    parser.add_argument("--preset", default="atari_ppo", choices=("atari_cpu", "atari_ppo"))
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--max-wait-ms", type=float, default=2.0,
                        help="the batcher's wait for more requests (Experiment's default)")
    args = parser.parse_args()
    if args.envs_per_runner < 1 or args.runner_cores < 1 or args.learner_cores < 1:
        parser.error("--envs-per-runner, --runner-cores and --learner-cores must be >= 1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(None, 2)  # as the learner's process has them
    from builders.vtrace import VTraceBuilder
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    config = training_config(args.preset, [])
    spec = make_environment_spec(make_environment(ENV_ID))
    builder = VTraceBuilder(config)
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=0)

    cores = os.cpu_count() or 1
    env = measure_env_limit(cores, args.warmup, args.duration)
    _show(f"env_limit ({cores} processes)", env)
    learner = measure_learner_limit(config, spec, policy, args.warmup, args.duration)
    _show("learner", learner)
    clusters: dict[int, dict[str, float]] = {}
    for runners in args.runners:
        clusters[runners] = measure_acting(
            policy, spec, runners, args.envs_per_runner, args.warmup, args.duration,
            args.max_wait_ms, delay_ms=args.delay_ms, pin=False,
            bandwidth_mbit=args.bandwidth_mbit)
        _show(f"cluster {runners} runners x {args.envs_per_runner}", clusters[runners])
    largest = max(args.runners)
    bare = measure_acting(policy, spec, largest, args.envs_per_runner, args.warmup,
                          args.duration, args.max_wait_ms, pin=False)
    _show(f"no_network {largest} runners", bare)
    print(json.dumps(_report(args, config, env, learner, clusters, bare)))


def _show(name: str, figures: dict[str, float]) -> None:
    print(f"{name}: " + ", ".join(f"{key}={value:,.3f}" for key, value in figures.items()
                                  if isinstance(value, float | int)), flush=True)


def _report(args: argparse.Namespace, config, env: dict[str, float],
            learner: dict[str, float], clusters: dict[int, dict[str, float]],
            bare: dict[str, float]) -> dict[str, Any]:
    from seed_agents.utils.reference import machine_report

    largest = max(clusters)
    row = clusters[largest]
    serving = row["server_cpu_ms_per_step"]
    learning = learner["cpu_ms_per_step"]
    runner = row["runner_cpu_ms_per_step"]
    bytes_per_frame = row["bytes_per_frame_up"] + row["bytes_per_frame_down"]
    runner_machine_steps = args.runner_cores * 1e3 / runner
    learner_steps = args.learner_cores * 1e3 / (serving + learning)
    frames = row["steps_per_s"] * ACTION_REPEAT
    baseline = bare["steps_per_s"] * ACTION_REPEAT
    return {
        "bench": "cluster_sim",
        "value": json_round(frames),
        "unit": f"frames/s ({largest} runner processes x {args.envs_per_runner} envs, "
                "simulated network)",
        "baseline": json_round(baseline),
        "baseline_kind": "the same runners without the simulated network",
        "ratio": json_round(frames / baseline, 3),
        "clusters": {str(runners): {
            "frames_per_s": json_round(r["steps_per_s"] * ACTION_REPEAT),
            "bytes_per_frame_up": json_round(r["bytes_per_frame_up"], 1),
            "bytes_per_frame_down": json_round(r["bytes_per_frame_down"], 1),
            "serving_cpu_ms_per_step": json_round(r["server_cpu_ms_per_step"], 3),
            "runner_cpu_ms_per_step": json_round(r["runner_cpu_ms_per_step"], 3),
            "mean_batch": json_round(r["mean_batch"], 1),
            "rtt_ms": json_round(r["rtt_ms"], 2),
            "rtt_p99_ms": json_round(r["rtt_p99_ms"], 2),
            "idle_cores": json_round(r["idle_cores"], 2),
        } for runners, r in clusters.items()},
        "env_cpu_ms_per_step": json_round(env["cpu_ms_per_step"], 3),
        "learner_cpu_ms_per_step": json_round(learning, 3),
        "serving_share": json_round(serving / (serving + learning), 3),
        "runner_machines_per_learner_core": json_round(1e3 / serving / runner_machine_steps, 2),
        "projection": {
            "runner_machine_cores": args.runner_cores,
            "runner_machine_env_steps_per_s": json_round(runner_machine_steps),
            "learner_machine_cores": args.learner_cores,
            "learner_machine_frames_per_s": json_round(learner_steps * ACTION_REPEAT),
            "runner_machines": json_round(learner_steps / runner_machine_steps, 1),
            "learner_network_mbit_per_s": json_round(
                learner_steps * ACTION_REPEAT * bytes_per_frame * 8 / 1e6, 1),
        },
        "machine": machine_report(config.precision),
        "config": {"env": ENV_ID, "runners": list(clusters),
                   "envs_per_runner": args.envs_per_runner, "delay_ms": args.delay_ms,
                   "bandwidth_mbit": args.bandwidth_mbit, "preset": args.preset,
                   "duration_s": args.duration, "warmup_s": args.warmup,
                   "max_wait_ms": args.max_wait_ms, "cpus": os.cpu_count()},
    }


if __name__ == "__main__":
    main()
