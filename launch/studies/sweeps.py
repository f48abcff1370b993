"""Seeds and grids in one command: every (setting, seed) of a sweep is an ordinary run.

    seed-agents train --agent r2d2 --env minatar:breakout --preset minatar \\
        --seeds 0-4 --grid learning_rate=1e-4,3e-4 --grid n_step=1,3 --logdir PARENT

runs each setting of the grid (the product of the `--grid` lists, in their order) with
each seed, as its own run in `PARENT/<setting>/seed-<n>`: its own `run.json`, CSVs and
checkpoints, so that `plot`, `eval` and `compare` read it as any run. Each run is a
`seed-agents train` of its own process (a clean TensorFlow, Ray and signal state per run),
one after another, or `--parallel N` at a time with their output in
`PARENT/<setting>/seed-<n>.out`. `PARENT/sweep.json` records what the sweep is; a run that
ended by its limits leaves `result.json` (`seed-agents train` writes it).

A sweep stopped half way (Ctrl-C, a lost session) continues with the same command and
`--resume`: finished runs are skipped, started ones resume from their newest checkpoint,
the rest start. A parent that holds another sweep is refused rather than mixed into.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from launch.studies.results import RESULT_FILE, read_result

SWEEP_FILE = "sweep.json"
DEFAULT_SETTING = "default"
# What makes two sweeps the same sweep: the rest (--parallel, --resume, progress output)
# may change between the pieces of one.
_IDENTITY = ("agent", "env", "backend", "steps", "preset", "overrides", "seeds", "grid",
             "dataset", "target_return")
_SWEEP_ONLY = ("seeds", "grid", "parallel", "search", "trials", "prune", "min_steps")
_STOP_GRACE_S = 60.0


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One (setting, seed) of a sweep."""

    setting: str  # the directory name of the setting under the parent
    overrides: tuple[str, ...]  # the grid's `key=value` strings, after the command's --set
    seed: int
    logdir: str

    @property
    def output_path(self) -> str:
        """Where the run's console output goes when runs go side by side."""
        return f"{self.logdir}.out"

    @property
    def name(self) -> str:
        return f"{self.setting}/seed-{self.seed}"


def parse_seeds(text: str) -> tuple[int, ...]:
    """`--seeds`: "0-4", "1,3,5" or both ("0-2,7"), in the order given, without repeats.

    Raises:
      ValueError: For a part that is not a seed or a range, or a repeated seed.
    """
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"--seeds takes seeds and ranges like 0-4 or 1,3,5; got {text!r}.")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise ValueError(f"--seeds range {part!r} runs backwards.")
        seeds.extend(range(first, last + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds names a seed twice: {text!r}.")
    return tuple(seeds)


def parse_grid(entries: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`--grid KEY=V1,V2` entries as (key, values). Values that hold commas themselves
    (`hidden_sizes=64,64`) are separated by `|` instead: `hidden_sizes=64,64|128,128`.

    Raises:
      ValueError: For an entry without `=` or values, an empty value, a key given twice
        or a value repeated.
    """
    grid: list[tuple[str, tuple[str, ...]]] = []
    for entry in entries:
        key, sep, text = entry.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ValueError(f"--grid takes KEY=V1,V2,...; got {entry!r}.")
        values = tuple(v.strip() for v in text.split("|" if "|" in text else ","))
        if any(not v for v in values):
            raise ValueError(f"--grid {entry!r} has an empty value.")
        if len(set(values)) != len(values):
            raise ValueError(f"--grid {entry!r} names a value twice.")
        if key in (k for k, _ in grid):
            raise ValueError(f"--grid names {key!r} twice: give its values in one entry.")
        grid.append((key, values))
    return grid


def setting_name(overrides: Sequence[str]) -> str:
    """A setting's directory name: its `key=value` strings joined by `,`, with anything
    but letters, digits and `._=,+-` written as `_` (a path separator stays out)."""
    if not overrides:
        return DEFAULT_SETTING
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(overrides))


def plan_sweep(parent: str, seeds: Sequence[int],
               grid: Sequence[tuple[str, Sequence[str]]]) -> list[SweepRun]:
    """Every (setting, seed), settings in the grid's order, seeds within each setting.

    Raises:
      ValueError: When two settings would share a directory name.
    """
    keys = [key for key, _ in grid]
    settings = [tuple(f"{k}={v}" for k, v in zip(keys, values, strict=True))
                for values in itertools.product(*(values for _, values in grid))]
    names = [setting_name(s) for s in settings]
    if len(set(names)) != len(names):
        raise ValueError("two settings of the grid share a directory name; use values "
                         "that differ in letters or digits.")
    return [SweepRun(name, setting, seed, os.path.join(parent, name, f"seed-{seed}"))
            for name, setting in zip(names, settings, strict=True) for seed in seeds]


def is_finished(logdir: str) -> bool:
    """Whether the run in `logdir` ended by its limits (it left `result.json`)."""
    return os.path.exists(os.path.join(logdir, RESULT_FILE))


def _identity(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key, None) for key in _IDENTITY}


def _check_parent(parent: str, args: argparse.Namespace) -> None:
    """Refuses a parent of another sweep, and one of this sweep without `--resume`."""
    path = os.path.join(parent, SWEEP_FILE)
    if not os.path.exists(path):
        if args.resume:
            raise ValueError(f"--resume continues a sweep, and {parent} holds none "
                             f"({SWEEP_FILE} is missing).")
        return
    with open(path) as f:
        recorded = json.load(f).get("identity")
    if recorded != _identity(args):
        changed = sorted(k for k in _IDENTITY
                         if (recorded or {}).get(k) != _identity(args).get(k))
        raise ValueError(f"{parent} holds another sweep (it differs in {', '.join(changed)}): "
                         "use another --logdir, or the same arguments with --resume.")
    if not args.resume:
        raise ValueError(f"{parent} holds this sweep already: add --resume to continue it "
                         "(finished runs are skipped, started ones resumed).")


def _child_args(args: argparse.Namespace, run: SweepRun) -> dict[str, Any]:
    child = {k: v for k, v in vars(args).items() if k not in _SWEEP_ONLY}
    child.update(seed=run.seed, logdir=run.logdir, resume=False, resume_if_checkpointed=True,
                 overrides=[*args.overrides, *run.overrides], seeds=None, grid=[], parallel=1,
                 search=[])
    return child


def check_runs(args: argparse.Namespace, runs: Sequence[SweepRun],
               make_experiment: Callable[[argparse.Namespace], Any]) -> None:
    """Builds every run's experiment before any starts: a bad grid key or value fails the
    sweep at once rather than after the runs before it.

    Raises:
      ValueError, TypeError: As `make_experiment` does, naming the setting.
    """
    for setting in dict.fromkeys(run.setting for run in runs):
        run = next(r for r in runs if r.setting == setting)
        try:
            make_experiment(argparse.Namespace(**_child_args(args, run)))
        except (ValueError, TypeError) as error:
            raise type(error)(f"setting {setting}: {error}") from None


def run_sweep(args: argparse.Namespace, make_experiment: Callable[[argparse.Namespace], Any],
              run_command: Callable[[str], list[str]], stream=None) -> int:
    """Runs the sweep `args` names (`--seeds`, `--grid`): the exit status of
    `seed-agents train` (0 all finished, 1 a run failed, 2 bad arguments, 130 Ctrl-C).

    The command line hands in how a run's config is built (`make_experiment`, to check
    every setting first) and the command that trains one run from the arguments file the
    sweep writes for it (`run_command(path)`)."""
    stream = stream or sys.stdout
    parent = args.logdir or time.strftime("runs/sweep-%Y%m%d-%H%M%S")
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else (args.seed,)
        grid = parse_grid(args.grid)
        runs = plan_sweep(parent, seeds, grid)
        if args.parallel < 1:
            raise ValueError(f"--parallel must be >= 1, got {args.parallel}.")
        if args.backend == "ray" and args.parallel > 1 and not args.ray_address:
            raise ValueError("runs side by side on Ray share one cluster: start it (ray "
                             "start --head) and name it with --ray-address, or run them one "
                             "at a time (--parallel 1).")
        _check_parent(parent, args)
        check_runs(args, runs, make_experiment)
    except (ValueError, TypeError) as error:
        print(f"seed-agents: error: {error}", file=sys.stderr)
        return 2
    os.makedirs(parent, exist_ok=True)
    with open(os.path.join(parent, SWEEP_FILE), "w") as f:
        json.dump({"identity": _identity(args), "settings": sorted({r.setting for r in runs}),
                   "seeds": list(seeds), "runs": [r.name for r in runs]}, f, indent=1)
    todo = [run for run in runs if not is_finished(run.logdir)]
    print(f"Sweep of {len(runs)} runs ({len(runs) // len(seeds)} settings x {len(seeds)} "
          f"seeds) in {parent}: {len(runs) - len(todo)} finished, {len(todo)} to run, "
          f"{args.parallel} at a time.", file=stream, flush=True)
    with signals_interrupt():
        failed = _run_all(args, todo, run_command, stream)
    if failed is None:
        print("seed-agents: interrupted; every run was stopped. The same command with "
              "--resume continues the sweep.", file=sys.stderr)
        return 130
    _print_summary(runs, stream)
    for run, status in failed:
        print(f"seed-agents: run {run.name} failed (exit status {status}); see "
              f"{run.output_path if args.parallel > 1 else 'its output above'}.",
              file=sys.stderr)
    return 1 if failed else 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within: Ctrl-C and SIGTERM reach the caller as KeyboardInterrupt, even where the
    process was started with SIGINT ignored (a background job of a script), so that a
    sweep or a search stops its runs (in the main thread; elsewhere signals are not
    ours to take)."""
    previous = ({sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
                if threading.current_thread() is threading.main_thread() else {})
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def start_run(args: argparse.Namespace, run: SweepRun,
           run_command: Callable[[str], list[str]]) -> subprocess.Popen:
    os.makedirs(os.path.dirname(run.logdir), exist_ok=True)
    spec = f"{run.logdir}.args.json"
    with open(spec, "w") as f:
        json.dump(_child_args(args, run), f)
    command = run_command(spec)
    env = tracker_environment(os.path.dirname(os.path.dirname(run.logdir)))
    if args.parallel == 1:  # one at a time: its progress on this console
        return subprocess.Popen(command, env=env)
    with open(run.output_path, "a") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def tracker_environment(parent: str) -> dict[str, str]:
    """The environment of a sweep's runs: in the trackers (`--logger wandb|mlflow`) they
    are one group, W&B's run group and MLflow's experiment named for the parent, and
    share MLflow's database in the parent, unless the environment names others."""
    env = dict(os.environ)
    name = os.path.basename(os.path.abspath(parent))
    env.setdefault("WANDB_RUN_GROUP", name)
    env.setdefault("MLFLOW_EXPERIMENT_NAME", name)
    env.setdefault("MLFLOW_TRACKING_URI",
                   "sqlite:///" + os.path.abspath(os.path.join(parent, "mlflow.db")))
    return env


def _run_all(args: argparse.Namespace, todo: list[SweepRun],
             run_command: Callable[[str], list[str]],
             stream) -> list[tuple[SweepRun, int]] | None:
    """Runs `todo`, `args.parallel` at a time; the failed runs, or None on Ctrl-C."""
    pending, running, failed = list(todo), {}, []
    try:
        while pending or running:
            while pending and len(running) < args.parallel:
                run = pending.pop(0)
                print(f"[sweep] {run.name}: started", file=stream, flush=True)
                running[start_run(args, run, run_command)] = run
            time.sleep(0.2)
            for process in [p for p in running if p.poll() is not None]:
                run = running.pop(process)
                if process.returncode == 0 and is_finished(run.logdir):
                    print(f"[sweep] {run.name}: finished", file=stream, flush=True)
                else:
                    failed.append((run, process.returncode))
                    print(f"[sweep] {run.name}: failed (exit status {process.returncode})",
                          file=stream, flush=True)
    except KeyboardInterrupt:
        stop_runs(running)
        return None
    return failed


def stop_runs(running: Iterable[subprocess.Popen]) -> None:
    """Ctrl-C: each run stops its nodes itself on SIGINT (a terminal sends it to the whole
    group; `kill` of the sweep only to the sweep), within a bound, then is killed."""
    for process in running:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + _STOP_GRACE_S
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _print_summary(runs: Sequence[SweepRun], stream) -> None:
    print(f"{'run':<40} {'stopped':<34} {'env steps':>12} {'mean return':>12}", file=stream)
    for run in runs:
        result = read_result(run.logdir)
        if result is None:
            print(f"{run.name:<40} {'not finished':<34}", file=stream)
            continue
        judged = result.get("eval_mean_return")
        score = judged if judged is not None else result.get("mean_return")
        print(f"{run.name:<40} {result.get('stop_reason', '')[:34]:<34} "
              f"{result.get('env_steps', 0):>12,} {float(score):>12.2f}", file=stream)
    print("(`seed-agents plot PARENT` draws each setting's curve over its seeds)", file=stream,
          flush=True)
