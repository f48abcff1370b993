"""`seed-agents plot`: learning curves of runs, and of sweeps' settings over their seeds.

A run's curve is its `train.csv` (the mean return of the last 100 training episodes
against env steps and wall time), with the greedy returns of its evaluator
(`evaluator.csv`, as a running mean of 5 episodes) where it has them. A path is a run's
logdir or a parent of runs (a sweep's `PARENT/<setting>/seed-<n>`: `launch.results`).
Runs of one setting form a group: under a parent, the setting they are seeds of; given by
themselves, runs of the same agent, environment, config and scale (they differ in seed,
budget or limits). A group's line is the mean (or IQM) over its runs, on a common grid
that ends where the shortest run ends, and its band the 95% bootstrap confidence interval
of that statistic over the runs (rliable, the `stats` extra), or their range (min to max)
where rliable is not installed or `--band range` asks for it. A resumed run's rows after
its restored checkpoint replace the killed run's rows past that point (the killed run's
last seconds were never checkpointed, so the resumed run lived them again).

matplotlib draws with its non-interactive "Agg" backend: no display needed.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from launch.commands import Agents, failing
from launch.run_record import read_run_record
from seed_agents.utils import storage

_EVAL_WINDOW = 5
_GRID_POINTS = 200
# Settings that decide what a run learns; the others (seed, budget, limits, logging) do not.
_GROUP_SETTINGS = ("num_runners", "envs_per_runner", "inference")


@dataclasses.dataclass
class RunCurves:
    """One run's curves: (env_steps, wall_s, mean_return) rows and evaluation points."""

    logdir: str
    group: str
    label: dict[str, Any]
    env_steps: np.ndarray
    wall_s: np.ndarray
    mean_return: np.ndarray
    eval_env_steps: np.ndarray
    eval_return: np.ndarray  # the running mean over `_EVAL_WINDOW` evaluations
    eval_raw: np.ndarray  # each evaluation episode's return


def _read_csv(path: str) -> list[dict[str, str]]:
    with storage.open_file(path) as f:
        return list(csv.DictReader(f))


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def continued(rows: Sequence[dict[str, float]], key: str = "env_steps") -> list[dict[str, float]]:
    """`rows` with the rows a resume superseded dropped: where `key` goes back (a resumed
    run restarting from its checkpoint), earlier rows past the new value go."""
    kept: list[dict[str, float]] = []
    for row in rows:
        while kept and kept[-1][key] > row[key]:
            kept.pop()
        kept.append(row)
    return kept


def read_run(logdir: str | os.PathLike[str]) -> RunCurves:
    """The curves of the run in `logdir`.

    Raises:
      ValueError: naming the run when it has no `train.csv` or no row with a mean return.
    """
    logdir = os.fspath(logdir)
    train = os.path.join(logdir, "train.csv")
    if not storage.isfile(train):
        raise ValueError(f"{logdir} has no train.csv: pass the logdir of a run.")
    table = _read_csv(train)
    if table and "env_steps" not in table[0] and "learner_steps" in table[0]:
        raise ValueError(f"{logdir} learned offline from a dataset (no env steps to plot "
                         "against): its curves are in learner.csv and evaluator.csv, by "
                         "learner step.")
    rows = [{"env_steps": _number(r.get("env_steps")), "wall_s": _number(r.get("wall_s")),
             "mean_return": _number(r.get("mean_return"))} for r in table]
    rows = continued([r for r in rows if math.isfinite(r["env_steps"])])
    rows = [r for r in rows if math.isfinite(r["mean_return"])]
    if not rows:
        raise ValueError(f"{train} has no row with a mean return yet (no episode ended).")
    evaluations: list[dict[str, float]] = []
    evaluator = os.path.join(logdir, "evaluator.csv")
    if storage.isfile(evaluator):
        evaluations = continued([
            {"env_steps": _number(r.get("env_steps")), "eval_return": _number(r.get("eval_return"))}
            for r in _read_csv(evaluator)])
        evaluations = [r for r in evaluations
                       if math.isfinite(r["env_steps"]) and math.isfinite(r["eval_return"])]
    group, label = _group(logdir)
    eval_returns = np.array([r["eval_return"] for r in evaluations], np.float64)
    return RunCurves(
        logdir=logdir, group=group, label=label,
        env_steps=np.array([r["env_steps"] for r in rows]),
        wall_s=np.array([r["wall_s"] for r in rows]),
        mean_return=np.array([r["mean_return"] for r in rows]),
        eval_env_steps=np.array([r["env_steps"] for r in evaluations], np.float64),
        eval_return=_running_mean(eval_returns, _EVAL_WINDOW),
        eval_raw=eval_returns,
    )


def _group(logdir: str) -> tuple[str, dict[str, Any]]:
    """The run's group key and the fields that name it (the directory's name when the
    run has no run.json)."""
    try:
        record = read_run_record(logdir)
    except ValueError:
        name = os.path.basename(os.path.normpath(logdir))
        return name, {"run": name}
    label = {"agent": record.builder.rsplit(".", 1)[-1].removesuffix("Builder"),
             "env": record.environment or "(factory)",
             **{f"{k}": v for k, v in sorted(record.config.items())},
             **{k: record.experiment.get(k) for k in _GROUP_SETTINGS}}
    return json.dumps(label, sort_keys=True), label


def config_labels(logdirs: Sequence[str]) -> dict[str, str]:
    """A readable setting per run given by itself: runs of the same config share it, and
    it names the agent, the environment and the settings in which the configs differ."""
    keyed = {logdir: _group(logdir) for logdir in logdirs}
    groups: dict[str, list[Any]] = {}
    for key, label in keyed.values():
        groups.setdefault(key, []).append(types.SimpleNamespace(label=label))
    names = _labels(groups, counts=False)
    return {logdir: names[key] for logdir, (key, _) in keyed.items()}


def _running_mean(values: np.ndarray, window: int) -> np.ndarray:
    if values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, values.size + 1), window)
    return (sums[1:] - sums[np.arange(values.size) + 1 - counts]) / counts


def _labels(groups: dict[str, list[Any]], counts: bool = True) -> dict[str, str]:
    """A legend label per group: agent and environment, and the settings in which groups
    differ (all of them would not fit)."""
    labels = {key: runs[0].label for key, runs in groups.items()}
    keys = sorted({k for label in labels.values() for k in label})
    differing = [k for k in keys if k not in ("agent", "env")
                 and len({json.dumps(label.get(k)) for label in labels.values()}) > 1]
    named = {}
    for key, label in labels.items():
        base = " ".join(str(label[k]) for k in ("agent", "env", "run") if k in label)
        extra = ", ".join(f"{k}={label.get(k)}" for k in differing)
        count = len(groups[key])
        runs = f" ({count} runs)" if count > 1 and counts else ""
        named[key] = f"{base}{' ' + extra if extra else ''}{runs}"
    return named


def _on_grid(xs: list[np.ndarray], ys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Several curves on a common grid up to the shortest's end: (grid, runs x points)."""
    if len(xs) == 1:
        return xs[0], ys[0][None, :]
    end = min(x[-1] for x in xs)
    start = max(x[0] for x in xs)
    grid = np.linspace(start, end, _GRID_POINTS) if end > start else np.array([end])
    return grid, np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)])


def _band(values: np.ndarray, statistic: str, band: str) -> tuple[np.ndarray, ...]:
    """The statistic over runs at each point and its band: the 95% bootstrap interval
    ("ci"), the runs' range ("range"), or none for one run."""
    from launch.results import curve_band

    if values.shape[0] == 1:
        return values[0], values[0], values[0]
    if band == "ci":
        return curve_band(values, statistic)
    from scipy.stats import trim_mean

    center = trim_mean(values, 0.25, axis=0) if statistic == "iqm" else values.mean(0)
    return center, values.min(0), values.max(0)


def resolve_band(band: str) -> str:
    """"auto": the confidence interval where rliable is installed, else the range.

    Raises:
      ValueError: For "ci" without rliable, naming the pip command.
    """
    from launch.results import require_rliable

    if band == "range":
        return band
    try:
        require_rliable()
    except ValueError:
        if band == "ci":
            raise
        return "range"
    return "ci"


def plot_runs(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str],
              title: str | None = None, statistic: str = "mean", band: str = "auto",
              frames_per_step: int = 1) -> dict[str, Any]:
    """Draws the learning curves of the runs `paths` hold (runs' logdirs or parents of
    runs) into the PNG `out`, a line per setting; returns what it drew.

    Raises:
      ValueError: naming the run, for a path without curves (nothing is drawn), or for a
        band or statistic it does not know.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from launch.results import find_runs

    if not paths:
        raise ValueError("plot needs at least one run's logdir or a parent of runs.")
    if statistic not in ("mean", "iqm"):
        raise ValueError(f"the statistic is mean or iqm, got {statistic!r}.")
    if band not in ("auto", "ci", "range"):
        raise ValueError(f"the band is auto, ci or range, got {band!r}.")
    if frames_per_step < 1:
        raise ValueError(f"frames per step must be >= 1, got {frames_per_step}.")
    band = resolve_band(band)
    refs = find_runs(paths)
    tasks = {ref.task for ref in refs}
    groups: dict[str, list[RunCurves]] = {}
    for ref in refs:
        name = ref.setting if len(tasks) == 1 else f"{ref.setting} on {ref.task}"
        groups.setdefault(name, []).append(read_run(ref.logdir))
    band_name = {"ci": "95% bootstrap CI", "range": "min to max"}[band]
    x_name = "frames" if frames_per_step > 1 else "env steps"
    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    drawn = []
    for i, (name, members) in enumerate(groups.items()):
        color = f"C{i % 10}"
        count = f" ({len(members)} runs, {statistic}, {band_name})" if len(members) > 1 else ""
        for axis, x_key in ((by_steps, "env_steps"), (by_time, "wall_s")):
            scale = frames_per_step if x_key == "env_steps" else 1
            x, values = _on_grid([getattr(run, x_key) * scale for run in members],
                                 [run.mean_return for run in members])
            center, low, high = _band(values, statistic, band)
            axis.plot(x, center, color=color,
                      label=f"{name}{count}: mean return (100 episodes)")
            if len(members) > 1:
                axis.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
        evaluated = [run for run in members if run.eval_return.size]
        if evaluated:
            x, values = _on_grid([run.eval_env_steps * frames_per_step for run in evaluated],
                                 [run.eval_return for run in evaluated])
            center, low, high = _band(values, statistic, band)
            by_steps.plot(x, center, color=color, linestyle="--",
                          label=f"{name}: greedy evaluation ({_EVAL_WINDOW}-episode mean)")
            if len(evaluated) > 1:
                by_steps.fill_between(x, low, high, color=color, alpha=0.1, linewidth=0)
            else:  # one run: its evaluation episodes themselves too
                by_steps.scatter(evaluated[0].eval_env_steps * frames_per_step,
                                 evaluated[0].eval_raw, color=color, s=9, alpha=0.5,
                                 linewidths=0)
        drawn.append({"label": name, "runs": [run.logdir for run in members],
                      "final_mean_return": [float(run.mean_return[-1]) for run in members],
                      "env_steps": [float(run.env_steps[-1]) for run in members],
                      "evaluations": sum(run.eval_env_steps.size for run in members)})
    by_steps.set_xlabel(x_name)
    by_steps.set_title(f"by {x_name}", fontsize="medium")
    by_time.set_xlabel("wall time (s)")
    by_time.set_title("by wall time (mean return)", fontsize="medium")
    for axis in (by_steps, by_time):
        axis.set_ylabel("return")
        axis.grid(alpha=0.3)
    # Below both panels: labels name the settings that differ, and can be long.
    figure.legend(*by_steps.get_legend_handles_labels(), loc="outside lower center",
                  fontsize="small")
    figure.suptitle(title or "Learning curves")
    out = os.fspath(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return {"out": out, "groups": drawn, "band": band, "statistic": statistic}


@failing
def run_plot(args: argparse.Namespace, agents: Agents) -> int:
    drawn = plot_runs(args.runs, args.out, title=args.title, statistic=args.statistic,
                      band=args.band, frames_per_step=args.frames_per_step)
    for group in drawn["groups"]:
        finals = ", ".join(f"{r:.1f}" for r in group["final_mean_return"])
        count = len(group["runs"])
        runs = f" ({count} runs)" if count > 1 else ""
        print(f"{group['label']}{runs}: final mean return {finals}", flush=True)
    print(f"curves: {drawn['out']}", flush=True)
    return 0
