"""`seed-agents plot`: learning curves of runs, and of sweeps' settings over their seeds.

A run's curve is its `train.csv` (the mean return of the last 100 training episodes
against env steps and wall time), with the greedy returns of its evaluator
(`evaluator.csv`, as a running mean of 5 episodes) where it has them. A path is a run's
logdir or a parent of runs (a sweep's `PARENT/<setting>/seed-<n>`: `launch.studies.results`).
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
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from launch.commands import Agents, failing
from launch.studies.results import _EVAL_WINDOW, RunCurves, read_run

_GRID_POINTS = 200


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
    from launch.studies.results import curve_band

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
    from launch.studies.results import require_rliable

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

    from launch.studies.results import find_runs

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
