"""`seed-agents compare`: each setting's final score over its seeds, with its uncertainty.

    seed-agents compare runs/sweep

For each setting of the runs found (`launch.studies.results.find_runs`: a sweep's
`PARENT/<setting>/seed-<n>`, or runs of one config), the final score of each seed (a
finished run's `result.json`: its evaluation environments' mean where it had them, else
its 100-episode mean), then over the seeds the interquartile mean and the mean, each with
its 95% stratified-bootstrap confidence interval (rliable: runs resampled within each
task). Several tasks (several environments, e.g. `compare sweep_pong sweep_breakout`
with the same settings) are aggregated on normalized scores: human-normalized where every
task is an Atari game with reference scores, else min-max over the compared runs. With
several settings, the probability that a run of one scores above a run of another
(averaged over tasks), with its interval. The table is printed and written as CSV.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from launch.studies.results import (
    final_score,
    find_runs,
    interval_estimates,
    probability_of_improvement,
    require_rliable,
)


def atari_game(task: str) -> str | None:
    """The game of an `atari:<game>[,options]` id, else None."""
    if not task.startswith("atari:"):
        return None
    return task.removeprefix("atari:").split(",")[0].strip()


def _normalizer(tasks: Sequence[str], normalize: str, scores: dict[str, list[float]]):
    """(how, a function task, score -> normalized score)."""
    from seed_agents.envs.atari_scores import REFERENCE_SCORES

    games = {task: atari_game(task) for task in tasks}
    if normalize == "auto":
        if len(tasks) == 1:
            normalize = "none"
        elif all(g in REFERENCE_SCORES for g in games.values()):
            normalize = "human"
        else:
            normalize = "minmax"
    if normalize == "human":
        missing = [task for task, game in games.items() if game not in REFERENCE_SCORES]
        if missing:
            raise ValueError(f"no random and human scores for {', '.join(missing)}: "
                             "use --normalize minmax or none.")

        def human(task: str, score: float) -> float:
            ref = REFERENCE_SCORES[games[task]]
            return (score - ref.random) / (ref.human - ref.random)

        return "human-normalized: (score - random) / (human - random)", human
    if normalize == "minmax":
        bounds = {task: (min(scores[task]), max(scores[task])) for task in tasks}

        def minmax(task: str, score: float) -> float:
            low, high = bounds[task]
            return (score - low) / (high - low) if high > low else 0.0

        return "min-max over the compared runs, per task", minmax
    return "raw scores", lambda task, score: score


def compare_runs(paths: Sequence[str], normalize: str = "auto", reps: int = 10_000,
                 unfinished: bool = False) -> dict[str, Any]:
    """The comparison `seed-agents compare` prints, as data.

    Raises:
      ValueError: For paths without runs, a setting that lacks a task the others have,
        or a normalization the tasks do not allow.
    """
    require_rliable()  # before reading anything: the one error a missing extra gives
    if reps < 100:
        raise ValueError(f"--reps must be >= 100, got {reps}.")
    refs = find_runs(paths)
    scores: dict[str, dict[str, list[tuple[str, float]]]] = {}  # setting -> task -> runs
    left_out = []
    for ref in refs:
        score = final_score(ref.logdir)
        if score is None or (not score[1] and not unfinished):
            left_out.append((ref.logdir, "no episode ended" if score is None
                             else "not finished"))
            continue
        scores.setdefault(ref.setting, {}).setdefault(ref.task, []).append(
            (ref.logdir, score[0]))
    if not scores:
        raise ValueError("no finished run to compare (add --unfinished to count runs at "
                         "their last score).")
    tasks = sorted({task for per_task in scores.values() for task in per_task})
    for setting, per_task in scores.items():
        lacking = [task for task in tasks if task not in per_task]
        if lacking:
            raise ValueError(f"setting {setting} has no run on {', '.join(lacking)}: "
                             "compare settings on the same tasks.")
    how, normalized = _normalizer(
        tasks, normalize, {t: [s for per in scores.values() for _, s in per[t]] for t in tasks})
    matrices, rows = {}, []
    for setting, per_task in scores.items():
        seeds = min(len(per_task[task]) for task in tasks)
        for task in tasks:  # equal runs per task: the first `seeds` by logdir
            for logdir, _ in sorted(per_task[task])[seeds:]:
                left_out.append((logdir, "more runs on this task than on another"))
        matrices[setting] = np.array(
            [[normalized(task, s) for _, s in sorted(per_task[task])[:seeds]]
             for task in tasks]).T  # runs x tasks
        rows.append({"setting": setting, "seeds": seeds,
                     "raw": {task: [s for _, s in sorted(per_task[task])[:seeds]]
                             for task in tasks}})
    estimates = interval_estimates(matrices, reps=reps)
    for row in rows:
        row.update(estimates[row["setting"]])
    improvement = [
        {"x": x, "y": y, **dict(zip(("p", "low", "high"), probability_of_improvement(
            matrices[x], matrices[y], reps=reps), strict=True))}
        for x in matrices for y in matrices if x != y]
    return {"tasks": tasks, "normalization": how, "settings": rows,
            "improvement": improvement, "left_out": left_out}


def _interval(estimate: tuple[float, float, float]) -> str:
    point, low, high = estimate
    return f"{point:.4g} [{low:.4g}, {high:.4g}]"


def format_table(comparison: dict[str, Any]) -> str:
    rows = comparison["settings"]
    width = max(12, *(len(r["setting"]) for r in rows))
    lines = [f"Final scores on {', '.join(comparison['tasks'])} "
             f"({comparison['normalization']}); 95% stratified-bootstrap CIs over seeds:",
             f"{'setting':<{width}}  {'seeds':>5}  {'IQM [95% CI]':<30}  {'mean [95% CI]':<30}"]
    for r in rows:
        lines.append(f"{r['setting']:<{width}}  {r['seeds']:>5}  {_interval(r['iqm']):<30}  "
                     f"{_interval(r['mean']):<30}")
    if comparison["improvement"]:
        lines.append("Probability of improvement, P(a run of X scores above a run of Y):")
        for pair in comparison["improvement"]:
            lines.append(f"  P({pair['x']} > {pair['y']}) = "
                         f"{_interval((pair['p'], pair['low'], pair['high']))}")
    for logdir, why in comparison["left_out"]:
        lines.append(f"left out: {logdir} ({why})")
    return "\n".join(lines)


def write_csv(comparison: dict[str, Any], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["setting", "seeds", "tasks", "normalization", "iqm", "iqm_low",
                         "iqm_high", "mean", "mean_low", "mean_high", "scores"])
        for r in comparison["settings"]:
            writer.writerow([r["setting"], r["seeds"], " ".join(comparison["tasks"]),
                             comparison["normalization"], *r["iqm"], *r["mean"],
                             " ".join(f"{task}={','.join(f'{s:g}' for s in scores)}"
                                      for task, scores in r["raw"].items())])
