"""`seed-agents plot`: learning curves of one or several runs, from their logs.

A run's curve is its `train.csv` (the mean return of the last 100 training episodes
against env steps and wall time), with the greedy returns of its evaluator
(`evaluator.csv`, as a running mean of 5 episodes) where it has them. Runs of the same
agent, environment, config and scale (they differ in seed, budget or limits) form a
group: its line is the mean over its runs and the shaded band their spread (min to
max), on a common grid that ends where the shortest run ends. A resumed run's rows after
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


def _running_mean(values: np.ndarray, window: int) -> np.ndarray:
    if values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, values.size + 1), window)
    return (sums[1:] - sums[np.arange(values.size) + 1 - counts]) / counts


def _labels(groups: dict[str, list[RunCurves]]) -> dict[str, str]:
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
        runs = f" ({count} runs)" if count > 1 else ""
        named[key] = f"{base}{' ' + extra if extra else ''}{runs}"
    return named


def _band(xs: list[np.ndarray], ys: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Mean, min and max of several curves on a common grid up to the shortest's end."""
    if len(xs) == 1:
        return xs[0], ys[0], ys[0], ys[0]
    end = min(x[-1] for x in xs)
    start = max(x[0] for x in xs)
    grid = np.linspace(start, end, _GRID_POINTS) if end > start else np.array([end])
    values = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys, strict=True)])
    return grid, values.mean(0), values.min(0), values.max(0)


def plot_runs(logdirs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str],
              title: str | None = None) -> dict[str, Any]:
    """Draws the runs' learning curves into the PNG `out`; returns what it drew.

    Raises:
      ValueError: naming the run, for a logdir without curves (nothing is drawn).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not logdirs:
        raise ValueError("plot needs at least one run's logdir.")
    runs = [read_run(logdir) for logdir in logdirs]
    groups: dict[str, list[RunCurves]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    labels = _labels(groups)
    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    drawn = []
    for i, (key, members) in enumerate(groups.items()):
        color = f"C{i % 10}"
        for axis, x_key in ((by_steps, "env_steps"), (by_time, "wall_s")):
            xs = [getattr(run, x_key) for run in members]
            ys = [run.mean_return for run in members]
            x, mean, low, high = _band(xs, ys)
            axis.plot(x, mean, color=color, label=f"{labels[key]}: mean return (100 episodes)")
            if len(members) > 1:
                axis.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
        evaluated = [run for run in members if run.eval_return.size]
        if evaluated:
            x, mean, low, high = _band([run.eval_env_steps for run in evaluated],
                                       [run.eval_return for run in evaluated])
            by_steps.plot(x, mean, color=color, linestyle="--",
                          label=f"{labels[key]}: greedy evaluation ({_EVAL_WINDOW}-episode mean)")
            if len(evaluated) > 1:
                by_steps.fill_between(x, low, high, color=color, alpha=0.1, linewidth=0)
            else:  # one run: its evaluation episodes themselves too
                by_steps.scatter(evaluated[0].eval_env_steps, evaluated[0].eval_raw,
                                 color=color, s=9, alpha=0.5, linewidths=0)
        drawn.append({"label": labels[key], "runs": [run.logdir for run in members],
                      "final_mean_return": [float(run.mean_return[-1]) for run in members],
                      "env_steps": [float(run.env_steps[-1]) for run in members],
                      "evaluations": sum(run.eval_env_steps.size for run in members)})
    by_steps.set_xlabel("env steps")
    by_steps.set_title("by env steps", fontsize="medium")
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
    return {"out": out, "groups": drawn}


@failing
def run_plot(args: argparse.Namespace, agents: Agents) -> int:
    drawn = plot_runs(args.runs, args.out, title=args.title)
    for group in drawn["groups"]:
        finals = ", ".join(f"{r:.1f}" for r in group["final_mean_return"])
        print(f"{group['label']}: final mean return {finals}", flush=True)
    print(f"curves: {drawn['out']}", flush=True)
    return 0
