"""Tuning: a search over config values that stops poor trials early.

    seed-agents train --agent vtrace --env gym:CartPole-v1 --steps 60000 \\
        --search learning_rate=log:1e-4,1e-2 --trials 8 --logdir PARENT

Each trial is an ordinary run of a sweep (`launch.studies.sweeps`): its own process, in
`PARENT/<setting>/seed-<n>` with its `run.json`, CSVs and checkpoints, so that `plot`,
`compare` and `eval` read the trials as any runs. While a trial runs, the search follows
its `train.csv` and reports its mean return (the last 100 episodes) against env steps;
successive halving (ASHA: Li et al. 2020) stops it (SIGINT: it stops its nodes and saves
a checkpoint) when it falls below the better half of the trials that reached the same
rung (`REDUCTION_FACTOR`). A finished trial's value is its final mean return (`result.json`).

Optuna, not Ray Tune. A trial here is a whole program on the chosen backend (`local_mp`
processes, or a Ray cluster when `--backend ray`), not a function Tune can place in one
of its actors; Optuna asks for settings and takes results (`ask`/`tell`), keeps the study
in one SQLite file in the parent (`tune.db`), which is what a search needs to survive
its machine (`--resume` continues it: finished trials count, a trial cut off half way
resumes from its checkpoint), and is one pure-Python dependency (the `[tune]` extra), where
Ray Tune would add its own trial runner beside our launcher. Its TPE sampler starts from
random settings (half the trials, seeded by `--seed`) and then samples where the good
ones were; its `SuccessiveHalvingPruner` is ASHA.

Search spaces (`--search KEY=SPACE`, repeatable): `log:LOW,HIGH` (log-uniform float),
`float:LOW,HIGH`, `int:LOW,HIGH`, `choice:A,B,...` (values holding commas separated by
`|`). Floats are rounded to 4 significant digits: the run's `--set` value and the
trial's directory name say the same number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from launch.studies.results import read_result
from launch.studies.sweeps import (
    SweepRun,
    check_runs,
    is_finished,
    setting_name,
    signals_interrupt,
    start_run,
    stop_runs,
)
from seed_agents.utils.trackers import CSVFollower, numbers

STUDY_FILE = "tune.db"
RESULT_FILE = "tune.json"
KINDS = ("log", "float", "int", "choice")
# What makes two searches the same search (the rest may change between its pieces).
_IDENTITY = ("agent", "env", "backend", "steps", "preset", "overrides", "search",
             "seed", "prune", "min_steps", "dataset", "target_return")
REDUCTION_FACTOR = 2
"""ASHA keeps the better half at each rung (rungs at min_steps x 2^k env steps). Li et
al.'s 3 or 4 suit searches of many trials; in one of ~8, where ASHA asks a trial to be
the best of those at its rung until twice the factor have reached it, keeping a third
stopped all but the first trial of a CartPole search at 11K-49K env steps of 100K on
differences the next rung reversed (`benchmarks/tune_cartpole.py`)."""


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """One `--search` entry: a config field and the values a trial may give it."""

    key: str
    kind: str  # one of KINDS
    values: tuple[str, ...]  # (low, high) for log/float/int; the choices for choice

    def distribution(self) -> Any:
        import optuna.distributions as d

        if self.kind == "choice":
            return d.CategoricalDistribution(self.values)
        low, high = self.values
        if self.kind == "int":
            return d.IntDistribution(int(low), int(high))
        return d.FloatDistribution(float(low), float(high), log=self.kind == "log")


def parse_search(entries: Sequence[str]) -> list[SearchSpace]:
    """`--search KEY=KIND:...` entries (see the module).

    Raises:
      ValueError: For an entry without `=` or a known kind, bounds that are not numbers or
        not increasing (positive for `log`), fewer than two choices, or a key given twice.
    """
    spaces: list[SearchSpace] = []
    for entry in entries:
        key, sep, text = entry.partition("=")
        kind, colon, rest = text.partition(":")
        key, kind = key.strip(), kind.strip()
        if not sep or not key or not colon or kind not in KINDS or not rest.strip():
            raise ValueError(f"--search takes KEY=KIND:..., KIND one of {', '.join(KINDS)} "
                             f"(learning_rate=log:1e-4,1e-2); got {entry!r}.")
        values = tuple(v.strip() for v in rest.split("|" if "|" in rest else ","))
        if kind == "choice":
            if len(values) < 2 or len(set(values)) != len(values) or not all(values):
                raise ValueError(f"--search {entry!r}: give two or more different choices.")
        else:
            _check_bounds(entry, kind, values)
        if key in (s.key for s in spaces):
            raise ValueError(f"--search names {key!r} twice.")
        spaces.append(SearchSpace(key, kind, values))
    return spaces


def _check_bounds(entry: str, kind: str, values: tuple[str, ...]) -> None:
    convert = int if kind == "int" else float
    try:
        low, high = (convert(v) for v in values)
    except ValueError:
        raise ValueError(f"--search {entry!r}: {kind} takes two {convert.__name__} bounds, "
                         "LOW,HIGH.") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"--search {entry!r}: the bounds must be finite and LOW < HIGH.")
    if kind == "log" and low <= 0:
        raise ValueError(f"--search {entry!r}: a log scale needs LOW > 0.")


def format_value(value: Any) -> str:
    """A sampled value as its `--set` string: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_overrides(spaces: Sequence[SearchSpace], params: dict[str, Any]) -> tuple[str, ...]:
    return tuple(f"{s.key}={format_value(params[s.key])}" for s in spaces)


def plan_trial(parent: str, seed: int, overrides: Sequence[str]) -> SweepRun:
    """A trial's run: named for its setting, so that a setting sampled twice (a choice, an
    int) is run once, and a trial cut off by a stop resumes in its own directory."""
    name = setting_name(overrides)
    return SweepRun(name, tuple(overrides), seed, os.path.join(parent, name, f"seed-{seed}"))


@dataclasses.dataclass
class _Running:
    trial: Any
    run: SweepRun
    process: subprocess.Popen
    follower: CSVFollower
    budget: float = math.inf  # env steps
    pruned: bool = False
    last_step: int = -1


def run_search(args: argparse.Namespace, make_experiment: Callable[[argparse.Namespace], Any],
               run_command: Callable[[str], list[str]], stream=None) -> int:
    """Runs the search `args` names (`--search`, `--trials`): the exit status of
    `seed-agents train` (0 done, 1 a trial failed, 2 bad arguments, 130 Ctrl-C)."""
    stream = stream or sys.stdout
    parent = args.logdir or time.strftime("runs/tune-%Y%m%d-%H%M%S")
    try:
        study, spaces = _open_study(args, parent, make_experiment)
    except (ValueError, TypeError) as error:
        print(f"seed-agents: error: {error}", file=sys.stderr)
        return 2
    cut_off = _cut_off(study)
    done = [t for t in study.trials if t.state.is_finished() and t.number not in cut_off]
    stopping = (f"successive halving from {args.min_steps:,} env steps"
                if args.prune == "asha" else "no early stopping")
    print(f"Search of {args.trials} trials over {', '.join(s.key for s in spaces)} in "
          f"{parent}: {len(done)} done, {args.trials - len(done)} to run, {args.parallel} at "
          f"a time; {stopping}.", file=stream, flush=True)
    with signals_interrupt():
        failed = _search(args, study, spaces, parent, args.trials - len(done), run_command,
                         stream)
    if failed is None:
        print("seed-agents: interrupted; every trial was stopped. The same command with "
              "--resume continues the search.", file=sys.stderr)
        return 130
    _report(study, spaces, parent, args.seed, stream)
    return 1 if failed else 0


def _open_study(args: argparse.Namespace, parent: str,
                make_experiment: Callable[[argparse.Namespace], Any]) -> tuple[Any, list]:
    spaces = parse_search(args.search)
    if args.seeds or args.grid:
        raise ValueError("--search tunes one seed (--seed); --seeds and --grid are a sweep's: "
                         "run the best setting over seeds after the search.")
    if args.trials < 1 or args.parallel < 1:
        raise ValueError("--trials and --parallel must be >= 1.")
    if args.prune not in ("asha", "none"):
        raise ValueError(f"--prune is asha or none, got {args.prune!r}.")
    if args.min_steps is not None and args.min_steps < 1:
        raise ValueError(f"--min-steps must be >= 1, got {args.min_steps}.")
    if args.backend == "ray" and args.parallel > 1 and not args.ray_address:
        raise ValueError("trials side by side on Ray share one cluster: start it (ray start "
                         "--head) and name it with --ray-address, or use --parallel 1.")
    optuna = _require_optuna()
    # The first rung: a quarter of the budget, so that rungs fall at 1/4 and 1/2 of it.
    args.min_steps = args.min_steps or max(1, (args.steps or 500_000) // 4)
    # Every space's bounds (and each choice) must build a run before any trial starts.
    extremes = [plan_trial(parent, args.seed, [f"{s.key}={value}"])
                for s in spaces for value in s.values]
    check_runs(args, extremes, make_experiment)
    path = os.path.join(parent, STUDY_FILE)
    identity = {key: getattr(args, key, None) for key in _IDENTITY}
    if os.path.exists(path) and not args.resume:
        raise ValueError(f"{parent} holds a search already: add --resume to continue it, or "
                         "use another --logdir.")
    if args.resume and not os.path.exists(path):
        raise ValueError(f"--resume continues a search, and {parent} holds none "
                         f"({STUDY_FILE} is missing).")
    os.makedirs(parent, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = (optuna.pruners.SuccessiveHalvingPruner(min_resource=args.min_steps,
                                                     reduction_factor=REDUCTION_FACTOR)
              if args.prune == "asha" else optuna.pruners.NopPruner())
    sampler = optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=max(1, args.trials // 2))
    study = optuna.create_study(study_name="tune", storage=f"sqlite:///{os.path.abspath(path)}",
                                direction="maximize", sampler=sampler, pruner=pruner,
                                load_if_exists=True)
    recorded = study.user_attrs.get("identity")
    if recorded is not None and recorded != identity:
        changed = sorted(k for k in identity if recorded.get(k) != identity[k])
        raise ValueError(f"{parent} holds another search (it differs in {', '.join(changed)})"
                         ": use another --logdir, or the same arguments with --resume.")
    study.set_user_attr("identity", identity)
    _requeue_cut_off(study, optuna)
    return study, spaces


def _require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ValueError("--search uses Optuna: pip install 'seed-agents[tune]'") from None
    return optuna


def _requeue_cut_off(study: Any, optuna: Any) -> None:
    """Trials a stopped search left running are failed and asked again with their
    settings: the new trial finds its run's directory and resumes it."""
    for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"resumed_from": trial.number})


def _cut_off(study: Any) -> set[int]:
    """The trials a stopped search left running, since asked again (`_requeue_cut_off`)."""
    return {t.user_attrs["resumed_from"] for t in study.trials if "resumed_from" in t.user_attrs}


def _search(args: argparse.Namespace, study: Any, spaces: Sequence[SearchSpace], parent: str,
            remaining: int, run_command: Callable[[str], list[str]],
            stream) -> list[Any] | None:
    """Asks and runs trials, `args.parallel` at a time, until `remaining` are told; the
    failed trials, or None on Ctrl-C."""
    from optuna.trial import TrialState

    distributions = {s.key: s.distribution() for s in spaces}
    running: list[_Running] = []
    failed = []
    try:
        while remaining > 0 or running:
            while remaining > 0 and len(running) < args.parallel:
                remaining -= 1
                trial = study.ask(distributions)
                run = plan_trial(parent, args.seed, trial_overrides(spaces, trial.params))
                if is_finished(run.logdir):  # a setting sampled again: its run is done
                    study.tell(trial, _final_value(run))
                    print(f"[tune] trial {trial.number} {run.setting}: ran before, "
                          f"{_final_value(run):.2f}", file=stream, flush=True)
                    continue
                print(f"[tune] trial {trial.number} {run.setting}: started", file=stream,
                      flush=True)
                process = start_run(args, run, run_command)
                running.append(_Running(trial, run, process,
                                        CSVFollower(os.path.join(run.logdir, "train.csv")),
                                        budget=args.steps or math.inf))
            time.sleep(0.5)
            for entry in list(running):
                _follow(entry)
                if entry.process.poll() is None:
                    continue
                running.remove(entry)
                state, value = _outcome(entry)
                study.tell(entry.trial, value if state == TrialState.COMPLETE else None,
                           state=state)
                if state == TrialState.FAIL:
                    failed.append(entry.trial)
                shown = f"{value:.2f} " if value is not None else ""
                print(f"[tune] trial {entry.trial.number} {entry.run.setting}: "
                      f"{state.name.lower()} {shown}(exit status {entry.process.returncode})",
                      file=stream, flush=True)
    except KeyboardInterrupt:
        stop_runs([entry.process for entry in running])
        return None
    return failed


def _follow(entry: _Running) -> None:
    """Reports the trial's new train rows; stops it when the pruner says so (a stopped
    trial reports nothing more: its value is the one it was stopped at, however far
    behind its process the follower had fallen)."""
    if entry.pruned:
        return
    for row in map(numbers, entry.follower.new_rows()):
        step, value = row.get("env_steps"), row.get("mean_return")
        if step is None or value is None or step <= entry.last_step:
            continue
        entry.trial.report(value, int(step))
        entry.last_step = int(step)
        # A trial at its budget is done: a rung there would stop what already finished.
        if step < entry.budget and entry.trial.should_prune():
            entry.pruned = True
            entry.process.send_signal(signal.SIGINT)
            return


def _outcome(entry: _Running) -> tuple[Any, float | None]:
    from optuna.trial import TrialState

    if entry.pruned:
        return TrialState.PRUNED, None
    if entry.process.returncode == 0 and is_finished(entry.run.logdir):
        return TrialState.COMPLETE, _final_value(entry.run)
    return TrialState.FAIL, None


def _final_value(run: SweepRun) -> float:
    result = read_result(run.logdir) or {}
    value = result.get("mean_return")
    return float(value) if value is not None and math.isfinite(float(value)) else -math.inf


def _report(study: Any, spaces: Sequence[SearchSpace], parent: str, seed: int,
            stream) -> None:
    """Prints every trial and the best, and writes them to `PARENT/tune.json`."""
    from optuna.trial import TrialState

    rows = []
    print(f"{'trial':>5} {'setting':<44} {'state':<9} {'env steps':>10} {'value':>10}",
          file=stream)
    cut_off = _cut_off(study)
    for trial in study.trials:
        if not trial.state.is_finished() or trial.number in cut_off:
            continue
        run = plan_trial(parent, seed, trial_overrides(spaces, trial.params))
        last = max(trial.intermediate_values, default=0)
        value = trial.value if trial.value is not None else trial.intermediate_values.get(last)
        rows.append({"trial": trial.number, "setting": run.setting, "params": trial.params,
                     "state": trial.state.name.lower(), "env_steps": last, "value": value,
                     "logdir": run.logdir})
        shown = f"{value:10.2f}" if value is not None else f"{'':>10}"
        print(f"{trial.number:>5} {run.setting[:44]:<44} {trial.state.name.lower():<9} "
              f"{last:>10,} {shown}", file=stream)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: t.value) if complete else None
    summary = {"best": None, "trials": rows}
    if best is not None:
        overrides = trial_overrides(spaces, best.params)
        summary["best"] = {"trial": best.number, "overrides": list(overrides),
                           "value": best.value}
        print(f"best: trial {best.number}, {' '.join('--set ' + o for o in overrides)}: "
              f"mean return {best.value:.2f}", file=stream)
    with open(os.path.join(parent, RESULT_FILE), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"trials: {os.path.join(parent, RESULT_FILE)}; curves: seed-agents plot {parent}",
          file=stream, flush=True)
