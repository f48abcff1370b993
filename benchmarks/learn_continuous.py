"""Continuous control at a fixed env-step budget: SAC and TD3 on HalfCheetah-v5, D4PG on
walker-walk (each agent's task; `--env` runs every chosen agent on another).

    python benchmarks/learn_continuous.py [--seeds 3] [--steps 100000] [--agents sac,d4pg,td3]
                                          [--env ENV] [--parallel 1] [--preset mpo:dmpo ...]
                                          [--set sac:key=value ...]
                                          [--results-dir DIR]

Each run is the in-process backend with central inference (runner threads call the
inference server, which writes n-step transitions to the rate-limited table), one runner
of `--envs` environments, the first of them a deterministic evaluation environment. At the
budget, the trained policy plays `--eval-episodes` episodes deterministically (its mean
action) on a fresh environment: that mean return is the seed's figure. A uniformly random
policy plays the same number of episodes on each task, in the same run: the baseline.

`--results-dir DIR` keeps each finished seed's figures in DIR (one JSON file per agent
and seed, with the settings it ran under); a later invocation with the same settings
reuses them instead of training again, so seeds can be run in pieces (one per process,
machine or session) and summarized in one line. A file whose settings differ is an error,
never silently mixed in.

`--runs-dir DIR --minutes M` splits a seed's own run into pieces: each seed trains in
DIR/<agent>_<env>_seed<N> with checkpoints, stops after M minutes of its run's wall time
(all pieces together), and the next invocation with the same arguments (and a larger
`--minutes`) continues it from its newest checkpoint (replay included). Ctrl-C or SIGTERM
stops it the same way, its checkpoint stored (exit status 130). A seed stopped short of
`--steps` reports no figure (`incomplete_seeds`) until a later piece finishes it.
Such a run is an ordinary one of the agent's own networks: its final checkpoint is what
the benchmark evaluates, and `seed-agents eval/export/record --logdir` load it.

`--steps` counts environment steps: with an action repeat (`--env dmc:walker-walk,repeat=2`)
the agent takes half as many steps and its run's own counters (train.csv, evaluator.csv) are
in agent steps; the JSON gives both.

`--parallel N` runs N seeds at once in separate processes (each with its TF threads
sized for its share of the cores); Ctrl-C stops each running seed as above. Prints one
JSON line last; measures, never asserts.
`value` is SAC's median over seeds (the first agent's without SAC); `ratio` is
(value - random) / (target - random), so 1 meets the task's target (3,000 on HalfCheetah at
100K env steps) and 0 is random play.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import os
import signal
import statistics
import sys
import time
from typing import Any

from seed_agents.utils.checkpointing import has_learner_checkpoint, learner_directory

TASKS = {"sac": "gym:HalfCheetah-v5", "d4pg": "dmc:walker-walk", "td3": "gym:HalfCheetah-v5"}
TARGETS = {"gym:HalfCheetah-v5": 3000.0, "dmc:walker-walk": 500.0}
"""The figure each task's `ratio` is measured against (1 meets it), where one was set."""

ANCHORS = {
    # State SAC, CURL's Table 1 (Laskin et al. 2020, 10 seeds), at 100K and 500K env steps.
    "dmc:walker-walk": {"State SAC": {100_000: 891.0, 500_000: 948.0}},
    "dmc:finger-spin": {"State SAC": {100_000: 811.0, 500_000: 923.0}},
    "dmc:reacher-easy": {"State SAC": {100_000: 746.0, 500_000: 923.0}},
    # TD3's own curves (Fujimoto et al. 2018, sfujim/TD3 learning_curves/HalfCheetah, 10
    # seeds, HalfCheetah-v1, 10K random steps first): the mean at 100K, 500K and 1M steps;
    # CleanRL's td3_continuous_action at 1M (3 seeds): 9,018.
    "gym:HalfCheetah-v5": {"TD3 (Fujimoto et al.)": {100_000: 5513.5, 500_000: 8444.5,
                                                     1_000_000: 9566.6},
                           "TD3 (CleanRL)": {1_000_000: 9018.3}},
}
"""Published returns at given env steps per task: a summary names those at its budget."""


def _builder(agent: str, overrides: list[str]) -> Any:
    from launch.commands.agents import builtin_agents
    from seed_agents.utils.overrides import parse_overrides

    builder, config = builtin_agents()[agent]
    return builder(parse_overrides(config, overrides))


def task(agent: str, args: argparse.Namespace) -> str:
    """The environment `agent` runs on: `--env`, else its own task."""
    return args.env or TASKS[agent]


def action_repeat(agent: str, args: argparse.Namespace) -> int:
    """Environment steps per agent step on `agent`'s task (`dmc:...,repeat=N`; else 1)."""
    from seed_agents.envs.dmc import action_repeat_of

    return action_repeat_of(task(agent, args))


def agent_steps(agent: str, args: argparse.Namespace) -> int:
    """The agent's steps in a budget of `--steps` environment steps: fewer by the action
    repeat, which published step budgets count (PlaNet, CURL, DrQ)."""
    return -(-args.steps // action_repeat(agent, args))


def anchor_task(agent: str, args: argparse.Namespace) -> str:
    """The task id the anchors are kept under: options (`,repeat=2`) dropped, since a
    budget in environment steps is the same budget with or without an action repeat."""
    return task(agent, args).split(",", 1)[0]


def evaluate(builder: Any, networks: Any, env_id: str, episodes: int, seed: int) -> float:
    """Mean return of `episodes` deterministic episodes of the policy over `networks`."""
    from seed_agents.actors import PolicyActor
    from seed_agents.environment_loop import EnvironmentLoop
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    env = make_environment(env_id, seed)
    spec = make_environment_spec(env)
    policy = builder.make_policy(networks, spec, evaluation=True, seed=seed)
    loop = EnvironmentLoop(env, PolicyActor(policy, action_spec=spec.actions))
    returns = [loop.run_episode()["episode_return"] for _ in range(episodes)]
    env.close()
    return float(sum(returns) / len(returns))


def run_seed(agent: str, seed: int, args: argparse.Namespace, threads: int) -> dict[str, Any]:
    """One training run and its final deterministic evaluation."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["SEED_AGENTS_TF_THREADS"] = str(threads)
    import tensorflow as tf

    from launch.backends.inprocess import run_inprocess
    from launch.experiment import Experiment

    builder = _builder(agent, [o.split(":", 1)[1] for o in args.overrides
                               if o.startswith(f"{agent}:")])
    captured: dict[str, Any] = {}

    def networks(spec):  # the run's one set of networks, kept for the evaluation
        captured["networks"] = builder.make_networks(spec)
        return captured["networks"]

    tf.random.set_seed(seed)
    logdir = run_directory(args, agent, seed)
    resume = bool(logdir and has_learner_checkpoint(learner_directory(logdir)))
    start = time.monotonic()
    repeat = action_repeat(agent, args)
    budget = agent_steps(agent, args)
    result = run_inprocess(Experiment(
        # A run with a logdir keeps the builder's own networks, so that its run.json says
        # so and `seed-agents eval/export` load it; its final checkpoint is evaluated.
        builder=builder, environment=task(agent, args),
        network_factory=None if logdir else networks,
        num_runners=1, envs_per_runner=args.envs, max_env_steps=budget, seed=seed,
        log_every_s=30.0, logdir=logdir, checkpoint_every_s=300.0 if logdir else None,
        resume=resume, max_wall_s=args.minutes * 60.0 if args.minutes else None),
        stream=sys.stderr)
    wall = time.monotonic() - start
    if result.env_steps < budget:
        print(f"{agent} seed {seed}: stopped at {result.env_steps * repeat:,} of "
              f"{args.steps:,} env steps ({result.stop_reason}); run again with more "
              f"--minutes to continue {logdir}", flush=True)
        return {"seed": seed, "incomplete": True, "env_steps": result.env_steps * repeat}
    if logdir:
        from launch.restore import load_run

        evaluated = load_run(logdir, builder=builder).networks
    else:
        evaluated = captured["networks"]
    eval_return = evaluate(builder, evaluated, task(agent, args), args.eval_episodes,
                           seed + 999_983)
    out = {
        "seed": seed,
        "eval_return": round(eval_return, 1),
        # None when no training episode ended (JSON has no NaN)
        "train_mean_return": (round(result.mean_return, 1)
                              if math.isfinite(result.mean_return) else None),
        "env_steps": result.env_steps * repeat,
        # The run's own counters (train.csv, evaluator.csv) are in agent steps.
        **({"agent_steps": result.env_steps, "action_repeat": repeat} if repeat > 1 else {}),
        "learner_steps": result.learner_steps,
        "wall_s": round(result.wall_s, 1),  # the run's, all its pieces
        "piece_wall_s": round(wall, 1),
        "updates_per_s": round(result.learner_steps / max(result.wall_s, 1e-9), 1),
        "samples_per_insert": round(result.learner_steps * builder.config.batch_size
                                    / max(result.env_steps, 1), 1),  # per agent step
    }
    print(f"{agent} seed {seed}: {out}", flush=True)
    return out


def run_directory(args: argparse.Namespace, agent: str, seed: int) -> str | None:
    """Where a seed's run keeps its checkpoints with `--runs-dir` (None without)."""
    if not args.runs_dir:
        return None
    slug = task(agent, args).replace(":", "_").replace("/", "_")
    return os.path.join(args.runs_dir, f"{agent}_{slug}_seed{seed}")


def seed_settings(agent: str, args: argparse.Namespace) -> dict[str, Any]:
    """What a seed's figure depends on besides its seed: runs agree on all of it to be
    summarized together."""
    return {"env": task(agent, args), "steps": args.steps, "envs": args.envs,
            "eval_episodes": args.eval_episodes,
            "overrides": sorted(o for o in args.overrides if o.startswith(f"{agent}:"))}


def _result_path(args: argparse.Namespace, agent: str, seed: int) -> str:
    if not args.env:  # the agent's own task: the name older results were kept under
        return os.path.join(args.results_dir, f"{agent}_seed{seed}.json")
    slug = args.env.replace(":", "_").replace("/", "_")
    return os.path.join(args.results_dir, f"{agent}_{slug}_seed{seed}.json")


def stored_result(args: argparse.Namespace, agent: str, seed: int) -> dict[str, Any] | None:
    """The seed's figures from `--results-dir`, or None when it has not run there."""
    if not args.results_dir or not os.path.exists(_result_path(args, agent, seed)):
        return None
    with open(_result_path(args, agent, seed)) as f:
        stored = json.load(f)
    if stored.get("settings") != seed_settings(agent, args):
        raise SystemExit(f"{_result_path(args, agent, seed)} ran with settings "
                         f"{stored.get('settings')}, not {seed_settings(agent, args)}: "
                         "use another --results-dir or the same settings.")
    return stored["result"]


def _run_seed_job(job: tuple) -> dict[str, Any]:
    agent, seed, args, _ = job
    result = run_seed(*job)
    if args.results_dir and not result.get("incomplete"):
        # Written whole then renamed: a killed run leaves no half file.
        path = _result_path(args, agent, seed)
        with open(path + ".tmp", "w") as f:
            json.dump({"settings": seed_settings(agent, args), "result": result}, f)
        os.replace(path + ".tmp", path)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's settings, checked (`argv`: sys.argv's by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000,
                        help="environment steps per run (agent steps times the action repeat)")
    parser.add_argument("--agents", default="sac,d4pg")
    parser.add_argument("--env", default=None,
                        help="run every chosen agent on this environment id instead of its "
                             "own task (e.g. dmc:finger-spin)")
    parser.add_argument("--envs", type=int, default=4,
                        help="environments of the one runner, the first for evaluation")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=1, help="seeds run at once")
    parser.add_argument("--results-dir", default=None,
                        help="keep each seed's figures here and reuse those already there")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="AGENT:KEY=VALUE", help="e.g. sac:batch_size=128")
    parser.add_argument("--preset", dest="presets", action="append", default=[],
                        metavar="AGENT:NAME",
                        help="an agent's named settings, as `seed-agents train --preset` "
                             "takes them (e.g. mpo:dmpo_large); --set values win over them")
    parser.add_argument("--runs-dir", default=None,
                        help="keep each seed's run (checkpoints) here, continuing one that "
                             "is there: pieces with --minutes")
    parser.add_argument("--minutes", type=float, default=None,
                        help="stop each seed's run after this many minutes of its wall time "
                             "(all its pieces together; needs --runs-dir)")
    args = parser.parse_args(argv)
    if args.minutes and not args.runs_dir:
        parser.error("--minutes makes pieces: name where the runs continue (--runs-dir).")
    from launch.commands.agents import builtin_configs

    known = set(TASKS) if args.env is None else set(builtin_configs())
    unknown = set(args.agents.split(",")) - known
    if unknown:
        parser.error(f"unknown agents {sorted(unknown)}; choose from {sorted(known)} (with "
                     "--env: any shipped agent)")
    try:
        args.overrides = with_presets(args.presets, args.overrides)
    except ValueError as e:
        parser.error(str(e))
    return args


def with_presets(presets: list[str], overrides: list[str]) -> list[str]:
    """`--set` values with each `--preset AGENT:NAME` spelled out before them, one value per
    agent and key (the last named wins): the expanded form is what a seed's settings record,
    so a run under a preset and one under the same values by `--set` are the same settings."""
    from launch.commands.cli import PRESETS

    items = []
    for preset in presets:
        agent, _, name = preset.partition(":")
        if name not in PRESETS.get(agent, {}):
            known = ", ".join(f"{a}:{n}" for a in sorted(PRESETS) for n in sorted(PRESETS[a]))
            raise ValueError(f"--preset {preset!r} is no agent's preset; presets: {known}")
        items += [f"{agent}:{item}" for item in PRESETS[agent][name]]
    last: dict[str, str] = {}
    for item in [*items, *overrides]:
        last[item.split("=", 1)[0]] = item
    return list(last.values())


def _raise_keyboard_interrupt_once(signum: int, frame: Any) -> None:
    # Later signals are ignored: a second Ctrl-C (or the parent's SIGTERM after the
    # terminal's SIGINT, with --parallel) would cut short the cleanup that stores the
    # checkpoints. `kill -9` still ends a process that hangs in it.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """SIGTERM (a scheduler, `kill`) and SIGINT stop the runs as Ctrl-C does, through
    their cleanup (checkpoints stored). SIGINT is set too, since a background job of a
    script (`nohup ... &`) starts with it ignored."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_keyboard_interrupt_once)


def main() -> None:
    args = parse_args()
    _stop_on_signals()
    try:
        measure(args)
    except KeyboardInterrupt:
        # Each seed's run stopped its threads and stored its checkpoints on the way out
        # (the in-process backend's cleanup): say how to go on rather than print a
        # traceback.
        if args.runs_dir:
            for line in _progress_lines(args):
                print(line, file=sys.stderr)
            how = (f"the same command continues each unfinished seed from its newest "
                   f"checkpoint in {args.runs_dir}")
        else:
            how = "without --runs-dir the runs were not kept: the same command starts over"
        print(f"learn_continuous: interrupted; {how}.", file=sys.stderr)
        raise SystemExit(130) from None


def _progress_lines(args: argparse.Namespace) -> list[str]:
    """Where each seed's kept run had got to (the last row of its `train.csv`): what an
    interrupted invocation measured."""
    lines = []
    for agent in args.agents.split(","):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            try:
                with open(os.path.join(run_directory(args, agent, seed), "train.csv"),
                          newline="") as f:
                    rows = list(csv.DictReader(f))
            except FileNotFoundError:
                continue
            if rows:
                reached = int(float(rows[-1]["env_steps"]))
                # A seed that had reached its budget before the signal is done, not stopped.
                how = ("finished at" if reached >= agent_steps(agent, args)
                       else "stopped at")
                lines.append(f"{agent} seed {seed}: {how} "
                             f"{reached * action_repeat(agent, args):,} of "
                             f"{args.steps:,} env steps, "
                             f"{int(float(rows[-1]['learner_steps'])):,} learner "
                             f"steps (its run's train.csv)")
    return lines


def _seed_process(job: tuple, results: Any) -> None:
    """A `--parallel` seed's process: its result goes to `results`; a signal stops its run
    through the run's cleanup, as in the parent, and makes it an incomplete one. Every
    exit but a crash (a non-zero status) puts a result."""
    _stop_on_signals()
    try:
        result = _run_seed_job(job)
    except KeyboardInterrupt:  # its run stored its checkpoints on the way out
        result = {"seed": job[1], "incomplete": True, "interrupted": True}
    results.put((job[:2], result))


def _run_in_parallel(jobs: list[tuple], parallel: int) -> list[dict[str, Any]]:
    """Runs `jobs` in up to `parallel` processes at once, one process per seed, and returns
    their results in `jobs`' order.

    Not a `multiprocessing.Pool`: on Ctrl-C a pool terminates its workers (SIGTERM, no
    cleanup) and may start a new worker on the next seed. Here an interrupt reaches each
    running seed as its own Ctrl-C (each stores its checkpoint), the parent waits for them,
    and no further seed starts; a seed whose process crashes is an error that names it
    (the others are stopped as on Ctrl-C).
    """
    import queue

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    pending = list(jobs)
    running: dict[tuple, multiprocessing.process.BaseProcess] = {}
    done: dict[tuple, dict[str, Any]] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                process = context.Process(target=_seed_process, args=(job, results),
                                          name=f"{job[0]}-seed{job[1]}")
                process.start()
                running[job[:2]] = process
            try:
                key, result = results.get(timeout=1.0)
            except queue.Empty:
                for key, process in running.items():
                    if process.exitcode not in (None, 0):
                        raise SystemExit(f"{key[0]} seed {key[1]}: its process ended "
                                         f"(exit status {process.exitcode}) without a "
                                         "result; its output above says why") from None
                continue
            done[key] = result
            running.pop(key).join()
    except BaseException:  # Ctrl-C, or a seed that crashed: stop the others, kept
        for process in running.values():  # each stops as if Ctrl-C were its own
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
        for process in running.values():
            process.join(timeout=600)
            if process.is_alive():  # hung in its cleanup: do not leave it behind
                process.kill()
                process.join()
        raise
    return [done[job[:2]] for job in jobs]


def measure(args: argparse.Namespace) -> None:
    """Trains (or reuses) every agent's seeds and prints the JSON line."""
    agents = args.agents.split(",")
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.parallel)
    jobs = [(agent, seed, args, threads) for agent in agents
            for seed in range(args.first_seed, args.first_seed + args.seeds)]
    stored = {(agent, seed): stored_result(args, agent, seed)
              for agent, seed, *_ in jobs}
    to_run = [job for job in jobs if stored[job[:2]] is None]
    reused = [f"{agent}:{seed}" for (agent, seed), result in stored.items() if result]
    start = time.monotonic()
    if args.parallel > 1:
        fresh = _run_in_parallel(to_run, args.parallel)
    else:
        fresh = [_run_seed_job(job) for job in to_run]
    wall = time.monotonic() - start
    stored.update({job[:2]: result for job, result in zip(to_run, fresh, strict=True)})
    incomplete = [f"{agent}:{seed}" for (agent, seed), result in stored.items()
                  if result.get("incomplete")]
    if incomplete:
        print(json.dumps({"bench": "learn_continuous", "incomplete_seeds": incomplete,
                          "note": "pieces remain: run again with more --minutes"}))
        return
    results = [stored[job[:2]] for job in jobs]
    by_agent = {agent: [r for (a, *_), r in zip(jobs, results, strict=True) if a == agent]
                for agent in agents}
    from seed_agents.envs.random_play import random_return

    randoms = {agent: random_return(task(agent, args), args.eval_episodes, 12_345)
               for agent in agents}

    def summary(agent: str) -> dict[str, Any]:
        runs = by_agent[agent]
        value = statistics.median(r["eval_return"] for r in runs)
        anchors = {name: at[args.steps]
                   for name, at in ANCHORS.get(anchor_task(agent, args), {}).items()
                   if args.steps in at}
        return {"env": task(agent, args), "value": round(value, 1),
                "random_return": round(randoms[agent], 1),
                "target": TARGETS.get(anchor_task(agent, args)), "anchors": anchors,
                "per_seed": runs}

    from seed_agents.utils.reference import machine_report

    report = {agent: summary(agent) for agent in agents}
    headline = report.get("sac") or next(iter(report.values()))
    value, random = headline["value"], headline["random_return"]
    target = headline["target"]
    ratio = None if target is None else round((value - random) / (target - random), 3)
    print(json.dumps({
        "bench": "learn_continuous",
        "value": value,
        "unit": "return",
        "seeds": args.seeds,
        **report,
        "wall_s": round(wall, 1),
        "reused_seeds": reused,
        "updates_per_s": round(statistics.median(r["updates_per_s"] for r in results), 1),
        "samples_per_insert": round(statistics.median(r["samples_per_insert"]
                                                      for r in results), 1),
        "baseline": random,
        "ratio": ratio,
        "ratio_kind": "(value - random) / (target - random): 1 meets the target (None: no "
                      "target set for this task)",
        "machine": machine_report("float32"),
        "config": {"steps": args.steps, "envs": args.envs, "eval_episodes":
                   args.eval_episodes, "parallel": args.parallel, "presets": args.presets,
                   "overrides": args.overrides},
    }))


if __name__ == "__main__":
    main()
