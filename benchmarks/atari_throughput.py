"""Pong throughput: environment and inference limits, central acting, IMPALA-style acting,
and V-trace training, all in one run on the same cores.

    python benchmarks/atari_throughput.py [--duration 20] [--layouts 2x32,2x32g2,4x16]

Phases, one after the other, each counted over `--duration` seconds after a warm-up:
  * env_limit: one process per core stepping `atari:Pong` (standard preprocessing) with
    random actions, summed: what the machine can step with nothing else to do.
    Measured again after the acting phases; the faster of the two is the limit (an
    understated limit would overstate `acting_vs_ideal`);
  * acting: runner processes x K environments streaming over gRPC to the central
    inference server (Nature CNN V-trace policy, no replay), for each `--layouts` entry
    (`2x32g2`: 2 runners of 32 environments stepped in 2 alternating groups, one group
    stepping while the other's actions are in flight); the fastest layout is the one
    reported, and the one every later phase uses;
    The runners' environments make single frames and the server stacks them (the
    launcher's default, `Experiment.frame_stacking`), and runner i is pinned to CPU i
    (`Experiment.pin_runners`);
  * unpinned: the chosen layout's acting again with the runners left to the scheduler:
    `pinned_vs_unpinned` is the acting rate over this one's;
  * runner_stacking: the chosen layout's acting again with each environment stacking its
    own frames and sending all four (as before server stacking): `server_vs_runner_stacking`
    is the acting rate over this one's;
  * delayed: the chosen layout's acting again with each stream `--delay-ms` away from the
    service each way (a delay in the runners' harness: this kernel has no `tc netem`);
    `delayed_vs_none` is its rate over the same layout's without the delay;
  * inference_limit: the same policy's step on a [B, 84, 84, 4] uint8 batch in a loop,
    B = the chosen layout's environments, with the learner's TF thread pools;
  * ideal = 1 / (1/env_limit + 1/inference_limit): stepping and inference sharing the
    cores perfectly, with nothing else (transport, batching) costing anything;
  * learner_limit: env steps/s the V-trace learner's train step alone consumes (random
    unrolls, no replay), for `training_ideal` = 1 / (1/env + 1/inference + 1/learner);
  * peak: a 4096-square matmul in float32, and in bfloat16 where the learner computes in
    it, with the learner's TF threads: this CPU's dense-arithmetic rate. The learner's
    FLOPs per env step are counted (not timed) from its network's shapes
    (`learner_flops_per_step`), and `learner_vs_peak` is the learner's achieved GFLOP/s
    over the peak at its precision;
  * impala_style: as many actor processes as the layout has runners, each with its own
    copy of the policy, one environment and batch-1 inference per step (IMPALA's actors),
    in float32 whatever the config says (faster than bfloat16 at batch 1);
  * training: the in-process backend with gRPC runner processes and the V-trace learner
    training on what they produce (a FIFO queue: acting waits when the learner is behind).

Where the time goes: every phase also reports the CPU milliseconds each part spends per
env step (process CPU time over the window). Rates fall when other programs share the
cores; CPU per step mostly does not, so `acting_cpu_vs_ideal` and `central_vs_impala_cpu`
are the figures to compare across runs on a busy machine. Acting also reports the
server's mean batch, its policy time per batch, the runners' round-trip time and the part
of it beyond the policy call (transport, decoding, waiting for a batch to close).
What a frame costs: `core_s_per_1m_frames` of each part (CPU per step, times a million
frames over the action repeat), dollars per million frames at `--usd-per-vcpu-hour`
(`seed_agents.utils.cost`), and `cost_vs_impala`: acting plus the learner, central
inference's over IMPALA-style acting's. `bytes_per_frame`: payload bytes on the wire per
emulator frame, runners to the service and back, counted by the service.
Prints one JSON line last; measures, never asserts.

The measuring functions and the processes they spawn live in `atari_phases.py`; this
module runs them in order and writes the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

# The sibling module (a script's own directory is on sys.path), as spawned processes find it.
from atari_phases import (
    ACTION_REPEAT,
    ENV_ID,
    json_round,
    learner_flops_per_step,
    measure_acting,
    measure_env_limit,
    measure_impala_style,
    measure_inference_limit,
    measure_learner_limit,
    measure_matmul_peak,
    measure_training,
    training_config,
)

from seed_agents.utils.cost import (
    PRICE_SOURCE,
    USD_PER_VCPU_HOUR,
    core_seconds_per_million_frames,
    usd,
)


def _layouts(text: str) -> list[tuple[int, int, int]]:
    """"2x32,2x32g2" -> [(2, 32, 1), (2, 32, 2)]: runners x envs per runner, and `gG` for
    G groups per runner (double-buffered when 2; lockstep without it)."""
    out = []
    for item in text.split(","):
        runners, _, rest = item.strip().partition("x")
        k, _, groups = rest.partition("g")
        out.append((int(runners), int(k), int(groups or 1)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before each")
    parser.add_argument("--training-warmup", type=float, default=10.0)
    parser.add_argument("--training-startup", type=float, default=600.0,
                        help="most seconds the training run may take to its first learner "
                             "step; the window starts from that step, however soon")
    # Larger runners amortize each message's cost and give the policy larger batches:
    # 2x256g2 reached 0.85 of the ideal where 2x128g2 reached 0.81 (2-core EPYC); past
    # 256 per runner nothing more was gained (2x320g2, 2x384g3, 2x512g4, 3x192g2).
    parser.add_argument("--layouts", default="2x128,2x128g2,2x256g2,2x384g3",
                        help="runners x envs per runner (gG: in G groups) to try for acting")
    parser.add_argument("--delay-ms", type=float, default=0.5,
                        help="the delayed phase: the chosen layout's acting again, each "
                             "stream this far from the service each way (a simulated "
                             "network: this kernel has no netem)")
    parser.add_argument("--env-processes", type=int, default=os.cpu_count() or 1)
    # Runners in lockstep send about one env-stepping time apart (~10 ms for 32 Pong
    # envs): with the 2 ms default of `Experiment` batches split in two (measured: mean
    # batch 34 of 64 and 10-20% fewer steps/s than with 20 ms).
    parser.add_argument("--max-wait-ms", type=float, default=20.0)
    parser.add_argument("--address", default="127.0.0.1:0",
                        help="inference service address: host:port, or unix:/path")
    parser.add_argument("--preset", default="atari_cpu", choices=("atari_cpu", "atari_ppo"),
                        help="the V-trace preset every phase uses")
    parser.add_argument("--usd-per-vcpu-hour", type=float, default=USD_PER_VCPU_HOUR,
                        help=f"the price the cost figures use (default: {PRICE_SOURCE})")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="V-trace config field for every phase, e.g. batch_size=16")
    parser.add_argument("--inter-op-threads", type=int, default=2,
                        help="TF inter-op threads of this process, which hosts the learner "
                             "and the inference server in training (as the backends give "
                             "such a process: LEARNER_INTER_OP_THREADS)")
    parser.add_argument("--phases",
                        default="env,acting,unpinned,runner_stacking,delayed,inference,learner,"
                                "peak,impala,training")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import configure_tf_threads

    # As the learner process has them (the inference server runs there): intra-op from
    # SEED_AGENTS_TF_THREADS (default 2), inter-op LEARNER_INTER_OP_THREADS (2).
    configure_tf_threads(None, args.inter_op_threads)
    from builders.vtrace import VTraceBuilder
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    config = training_config(args.preset, args.overrides)
    spec = make_environment_spec(make_environment(ENV_ID))
    builder = VTraceBuilder(config)
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=0)
    results = _run_phases(args, config, policy, spec)
    print(json.dumps(_report(results, args, config)))


def _show(name: str, figures: dict[str, float]) -> None:
    print(f"{name}: " + ", ".join(f"{key}={value:,.3f}" for key, value in figures.items()),
          flush=True)


def _run_phases(args: argparse.Namespace, config, policy, spec) -> dict[str, Any]:
    """Every phase asked for, in order; acting first picks the layout the rest use."""
    phases = set(args.phases.split(","))
    nothing = {"steps_per_s": float("nan")}
    out: dict[str, Any] = {"env": nothing, "acting": {}, "impala": nothing, "delayed": nothing,
                           "learner": nothing, "runner_stacking": nothing, "unpinned": nothing,
                           "inference": {"obs_per_s": float("nan")}, "peak": {},
                           "training": {"trained_steps_per_s": float("nan"),
                                        "env_steps_per_s": float("nan")}}
    if "env" in phases:
        out["env"] = measure_env_limit(args.env_processes, args.warmup, args.duration)
        _show(f"env_limit ({args.env_processes} processes)", out["env"])
    layouts = _layouts(args.layouts)
    if "acting" in phases:
        for runners, k, groups in layouts:
            name = _layout_name(runners, k, groups)
            out["acting"][name] = result = measure_acting(
                policy, spec, runners, k, args.warmup, args.duration, args.max_wait_ms,
                args.address, groups)
            _show(f"acting {name}", result)
        out["layout"] = max(out["acting"], key=lambda n: out["acting"][n]["steps_per_s"])
        if "env" in phases:
            # Again after acting: this machine's env rate moved 30-40% between runs
            # (other tenants), and an understated limit overstates acting_vs_ideal.
            # The report counts the faster of the two.
            out["env_again"] = measure_env_limit(args.env_processes, args.warmup,
                                                 args.duration)
            _show(f"env_limit again ({args.env_processes} processes)", out["env_again"])
    else:
        out["layout"] = _layout_name(*layouts[0])
    runners, k, groups = _layouts(out["layout"])[0]
    if "unpinned" in phases:
        out["unpinned"] = measure_acting(
            policy, spec, runners, k, args.warmup, args.duration, args.max_wait_ms,
            args.address, groups, pin=False)
        _show(f"acting {out['layout']}, runners not pinned", out["unpinned"])
    if "runner_stacking" in phases:
        out["runner_stacking"] = measure_acting(
            policy, spec, runners, k, args.warmup, args.duration, args.max_wait_ms,
            args.address, groups, stack_on_server=False)
        _show(f"acting {out['layout']}, frames stacked by the runners",
              out["runner_stacking"])
    if "delayed" in phases:
        out["delayed"] = measure_acting(policy, spec, runners, k, args.warmup, args.duration,
                                        args.max_wait_ms, args.address, groups, args.delay_ms)
        _show(f"acting {out['layout']}, {args.delay_ms} ms each way", out["delayed"])
    if "inference" in phases:
        out["inference"] = measure_inference_limit(policy, runners * k, args.warmup,
                                                   args.duration)
        _show(f"inference_limit (batch {runners * k})", out["inference"])
    if "learner" in phases:
        out["learner"] = measure_learner_limit(config, spec, policy, args.warmup,
                                               args.duration)
        _show("learner_limit", out["learner"])
    # Counted, not timed: the learner's arithmetic per env step from its network's shapes.
    out["arithmetic"] = learner_flops_per_step(config, spec)
    if "peak" in phases:
        from seed_agents.utils.hardware import resolve_precision

        out["precision"] = resolve_precision(config.precision).precision
        out["peak"] = measure_matmul_peak(out["precision"], min(args.duration, 5.0))
        _show("matmul peak (GFLOP/s)", out["peak"])
    if "impala" in phases:
        # Float32: at batch 1 bfloat16's casts cost more than its convolutions save (1.96
        # against 1.32 CPU-ms per step measured here), and the baseline gets its best.
        out["impala"] = measure_impala_style(dataclasses.replace(config, precision="float32"),
                                             runners, args.warmup, args.duration)
        _show(f"impala_style ({runners} actors)", out["impala"])
    if "training" in phases:
        out["training"] = measure_training(config, runners, k, args.training_warmup,
                                           args.duration, args.max_wait_ms,
                                           args.training_startup, args.address, groups)
        _show(f"training {out['layout']}", out["training"])
    return out


def _report(results: dict[str, Any], args: argparse.Namespace, config) -> dict[str, Any]:
    """The JSON line: the headline figures, then the breakdowns that explain them."""
    from seed_agents.utils.reference import machine_report

    layout = results["layout"]
    runners, k, groups = _layouts(layout)[0]
    env_runs = [results["env"], *([results["env_again"]] if "env_again" in results else [])]
    env_best = max(env_runs, key=lambda r: r["steps_per_s"])  # the conservative ideal
    env_limit = env_best["steps_per_s"]
    inference_limit = results["inference"]["obs_per_s"]
    ideal = _combined(env_limit, inference_limit)
    acting_figures = results["acting"].get(layout, {})
    acting = acting_figures.get("steps_per_s", float("nan"))
    impala_style = results["impala"]["steps_per_s"]
    training = results["training"]
    frames = training["trained_steps_per_s"] * ACTION_REPEAT
    baseline = impala_style * ACTION_REPEAT
    learner_limit = results["learner"]["steps_per_s"]
    training_ideal = _combined(env_limit, inference_limit, learner_limit)
    cpu = {
        "env": env_best.get("cpu_ms_per_step", float("nan")),
        "inference": results["inference"].get("cpu_ms_per_obs", float("nan")),
        "acting_runners": acting_figures.get("runner_cpu_ms_per_step", float("nan")),
        "acting_server": acting_figures.get("server_cpu_ms_per_step", float("nan")),
        "learner": results["learner"].get("cpu_ms_per_step", float("nan")),
        "impala_actor": results["impala"].get("cpu_ms_per_step", float("nan")),
    }
    # The learner's arithmetic against the CPU's dense-matmul rate at its precision.
    flops = results["arithmetic"]["learner_flops_per_step"]
    peak = results["peak"].get(results.get("precision", "float32"), float("nan"))
    learner_gflops = flops * learner_limit / 1e9
    training_learner_gflops = flops * training["trained_steps_per_s"] / 1e9
    # Core-seconds per million frames of each part, and what a frame costs either way:
    # the same learner, fed by central inference or by IMPALA's actors (each a policy copy
    # at batch 1; the parameter broadcast they also need is not counted).
    core_s = {name: core_seconds_per_million_frames(cpu_ms, ACTION_REPEAT) for name, cpu_ms in {
        "central_acting": cpu["acting_runners"] + cpu["acting_server"],
        "impala_acting": cpu["impala_actor"],
        "learner": cpu["learner"],
        "training": training.get("cpu_ms_per_trained_step", float("nan")),
    }.items()}
    central_total = core_s["central_acting"] + core_s["learner"]
    impala_total = core_s["impala_acting"] + core_s["learner"]
    price = args.usd_per_vcpu_hour
    return {
        "bench": "atari_throughput",
        "value": json_round(frames),
        "unit": "frames/s",
        "acting_vs_ideal": json_round(acting / ideal, 3),
        "central_vs_impala": json_round(acting / impala_style, 2),
        "env_limit": json_round(env_limit),
        "env_limit_runs": [json_round(r["steps_per_s"]) for r in env_runs],  # before, after acting
        "inference_limit": json_round(inference_limit),
        "ideal": json_round(ideal),
        "acting": json_round(acting),
        "impala_style": json_round(impala_style),
        # The chosen layout's acting with every stream `delay_ms` away each way, over the
        # same layout without the delay (measured above, in this run).
        # The chosen layout with the environments stacking their own frames (all four sent
        # per step): acting (frames stacked by the server) over that rate.
        # The chosen layout with the runners not pinned to CPUs: acting over that rate.
        "acting_unpinned": json_round(results["unpinned"]["steps_per_s"]),
        "pinned_vs_unpinned": json_round(acting / results["unpinned"]["steps_per_s"], 3),
        "acting_runner_stacking": json_round(results["runner_stacking"]["steps_per_s"]),
        "server_vs_runner_stacking": json_round(
            acting / results["runner_stacking"]["steps_per_s"], 3),
        "runner_stacking_cpu_ms_per_step": json_round(
            results["runner_stacking"].get("runner_cpu_ms_per_step", float("nan"))
            + results["runner_stacking"].get("server_cpu_ms_per_step", float("nan")), 3),
        "acting_delayed": json_round(results["delayed"]["steps_per_s"]),
        "delayed_vs_none": json_round(results["delayed"]["steps_per_s"] / acting, 3),
        "training": json_round(frames),
        "training_env_steps_per_s": json_round(training["trained_steps_per_s"]),
        "training_acting_env_steps_per_s": json_round(training["env_steps_per_s"]),
        "baseline": json_round(baseline),
        "ratio": json_round(frames / baseline, 2),
        "acting_layouts": {
            name: {"steps_per_s": json_round(r["steps_per_s"]),
                   "cpu_ms_per_step": json_round(r["runner_cpu_ms_per_step"]
                                             + r["server_cpu_ms_per_step"], 3),
                   "mean_batch": json_round(r["mean_batch"], 1)}
            for name, r in results["acting"].items()},
        # CPU milliseconds per env step of each part. Unlike the rates, these barely move
        # when other programs share the cores, so they say where the time goes: acting
        # costs runners + server, against env + inference when nothing else costs a thing.
        "cpu_ms_per_step": {key: json_round(value, 3) for key, value in cpu.items()},
        "acting_cpu_vs_ideal": json_round((cpu["env"] + cpu["inference"])
                                      / (cpu["acting_runners"] + cpu["acting_server"]), 3),
        "central_vs_impala_cpu": json_round(cpu["impala_actor"]
                                        / (cpu["acting_runners"] + cpu["acting_server"]), 2),
        "learner_limit": json_round(learner_limit),
        "learner_flops_per_step": json_round(flops),
        "learner_gflops": json_round(learner_gflops, 1),
        "training_learner_gflops": json_round(training_learner_gflops, 1),
        "peak_gflops": {key: json_round(value, 1) for key, value in results["peak"].items()},
        # The learner alone (learner_limit) and in training, over the matmul peak at the
        # learner's precision: how far its step is from what this CPU computes.
        "learner_vs_peak": json_round(learner_gflops / peak, 3),
        "training_learner_vs_peak": json_round(training_learner_gflops / peak, 3),
        "learner_arithmetic": {key: json_round(value) for key, value in
                               results["arithmetic"].items()},
        "core_s_per_1m_frames": {key: json_round(value, 1) for key, value in core_s.items()},
        "usd_per_1m_frames": {"central": json_round(usd(central_total, price), 4),
                              "impala": json_round(usd(impala_total, price), 4),
                              "training": json_round(usd(core_s["training"], price), 4)},
        "usd_per_vcpu_hour": price,
        "price_source": PRICE_SOURCE if price == USD_PER_VCPU_HOUR else "--usd-per-vcpu-hour",
        # Acting plus the learner, per frame: central inference's cost over IMPALA-style
        # acting's (below 1: central is cheaper; SEED RL reports 40-80% cheaper).
        "cost_vs_impala": json_round(central_total / impala_total, 3),
        "acting_cost_vs_impala": json_round(core_s["central_acting"] / core_s["impala_acting"], 3),
        # Payload bytes per emulator frame on the wire, each way (the chosen layout, frames
        # stacked by the server; and with the runners stacking them).
        "bytes_per_frame": {
            "up": json_round(acting_figures.get("bytes_per_frame_up"), 1),
            "down": json_round(acting_figures.get("bytes_per_frame_down"), 1),
            "runner_stacking_up": json_round(
                results["runner_stacking"].get("bytes_per_frame_up"), 1)},
        # Stepping, inference and learning sharing the cores perfectly: training's bound,
        # in env steps/s (as `training_env_steps_per_s`).
        "training_ideal": json_round(training_ideal),
        "training_vs_ideal": json_round(training["trained_steps_per_s"] / training_ideal, 3),
        # The same in CPU per trained env step (env + inference + learner alone, over what
        # training spent): the figure that holds when other programs share the cores.
        "training_cpu_vs_ideal": json_round(
            (cpu["env"] + cpu["inference"] + cpu["learner"])
            / training.get("cpu_ms_per_trained_step", float("nan")), 3),
        # Cores the machine left idle in each phase: near 0 with our rates low means
        # another program had the cores; well above 0 means a stall of ours.
        "idle_cores": {name: json_round(results[name].get("idle_cores"), 2) for name in
                       ("env", "inference", "learner", "impala", "training",
                        "runner_stacking", "unpinned")}
        | {"acting": json_round(acting_figures.get("idle_cores"), 2),
           "delayed": json_round(results["delayed"].get("idle_cores"), 2)},
        "acting_breakdown": {key: json_round(value, 3) for key, value in acting_figures.items()},
        "training_breakdown": {key: json_round(value, 2) for key, value in training.items()},
        # Where it ran: CPU, flags, TF, precision and one-second reference rates.
        "machine": machine_report(config.precision),
        "config": {
            "env": ENV_ID, "layout": layout, "runners": runners, "envs_per_runner": k,
            "runner_groups": groups, "delay_ms": args.delay_ms,
            "inference_batch": runners * k, "env_processes": args.env_processes,
            "duration_s": args.duration, "warmup_s": args.warmup,
            "training_warmup_s": args.training_warmup, "max_wait_ms": args.max_wait_ms,
            "address": args.address, "inter_op_threads": args.inter_op_threads,
            "preset": args.preset,
            "cpus": os.cpu_count(),
            "vtrace": {name: getattr(config, name) for name in (
                "torso", "hidden_sizes", "separate_value_torso", "ppo_clip",
                "sgd_steps_per_batch", "unroll_length", "batch_size", "queue_size",
                "precision", "learning_rate")},
        },
    }


def _layout_name(runners: int, k: int, groups: int) -> str:
    return f"{runners}x{k}" + (f"g{groups}" if groups > 1 else "")


def _combined(*rates: float) -> float:
    """The rate of doing every part in turn on the same cores: 1 / sum(1 / rate)."""
    if any(not rate > 0 for rate in rates):  # Also NaN: a phase not run.
        return float("nan")
    return 1.0 / sum(1.0 / rate for rate in rates)


if __name__ == "__main__":
    main()
