"""Runs on disk as results: which runs a path holds, how they group, their final scores,
and aggregates over seeds with their uncertainty.

A path is a run's logdir (it holds `train.csv`) or a parent of runs (a sweep's
`PARENT/<setting>/seed-<n>`, any tree of runs): `find_runs` expands it. A run under a
parent belongs to the setting named by its directory's parent there; a run given by
itself to the setting of its config (`launch.commands.plotting` labels it).

The statistics are `rliable`'s (Agarwal et al. 2021): interquartile mean and mean with
stratified-bootstrap confidence intervals, and the probability of improvement, rather
than statistics of our own. It is an extra (`pip install 'seed-agents[stats]'`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

RESULT_FILE = "result.json"  # what `seed-agents train` leaves when a run ends by its limits
STATS_EXTRA = "pip install 'seed-agents[stats]'"


@dataclasses.dataclass(frozen=True)
class RunRef:
    """One run found under a path: where it is and what it is a seed of."""

    logdir: str
    setting: str  # the group it is a seed of
    task: str  # its environment id


def _is_run(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "train.csv"))


def find_runs(paths: Sequence[str | os.PathLike[str]]) -> list[RunRef]:
    """The runs `paths` name: each a run's logdir or a directory of runs below it.

    Raises:
      ValueError: For a path that is neither, naming it.
    """
    from launch.commands.plotting import config_labels

    found: list[tuple[str, str | None]] = []  # (logdir, setting; None: by its config)
    for path in map(os.fspath, paths):
        if _is_run(path):
            found.append((path, None))
            continue
        if not os.path.isdir(path):
            raise ValueError(f"{path} has no train.csv: pass the logdir of a run or a "
                             "parent of runs (a sweep's --logdir).")
        below = sorted(root for root, _, files in os.walk(path) if "train.csv" in files)
        if not below:
            raise ValueError(f"{path} holds no run (no train.csv below it).")
        for logdir in below:
            relative = os.path.relpath(logdir, path)
            found.append((logdir, os.path.dirname(relative)
                          or os.path.basename(os.path.normpath(path))))
    by_config = config_labels([logdir for logdir, setting in found if setting is None])
    return [RunRef(logdir, setting if setting is not None else by_config[logdir],
                   _task(logdir)) for logdir, setting in found]


def _task(logdir: str) -> str:
    try:
        with open(os.path.join(logdir, "run.json")) as f:
            return json.load(f).get("environment") or "(factory)"
    except (OSError, json.JSONDecodeError):
        return "(unknown)"


def final_score(logdir: str) -> tuple[float, bool] | None:
    """A run's final score and whether it finished: `result.json`'s evaluation
    environments' mean where the run had them, else its 100-episode mean (a benchmark's
    record: its `value`); for an
    unfinished run, the last mean return of its `train.csv`. None: no episode ended."""
    path = os.path.join(logdir, RESULT_FILE)
    if os.path.exists(path):
        with open(path) as f:
            result = json.load(f)
        # `value`: the record a learning benchmark leaves (benchmarks/learn_atari5.py).
        for key in ("eval_mean_return", "mean_return", "value"):
            value = result.get(key)
            if value is not None and math.isfinite(float(value)):
                return float(value), True
        return None
    from launch.commands.plotting import read_run

    try:
        return float(read_run(logdir).mean_return[-1]), False
    except ValueError:
        return None


def require_rliable() -> Any:
    """rliable's `library` and `metrics` modules.

    Raises:
      ValueError: When the extra is not installed, naming the pip command.
    """
    try:
        from rliable import library, metrics
    except ImportError:
        raise ValueError("aggregates with confidence intervals use rliable: "
                         f"{STATS_EXTRA}") from None
    return library, metrics


def interval_estimates(scores: Mapping[str, np.ndarray], reps: int = 10_000,
                       seed: int = 0) -> dict[str, dict[str, tuple[float, float, float]]]:
    """IQM and mean of each setting's (runs x tasks) score matrix, each as (point, lower,
    upper) of its 95% stratified-bootstrap confidence interval (runs resampled within
    each task)."""
    library, metrics = require_rliable()

    def aggregates(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])

    points, intervals = _estimates(library, dict(scores), aggregates, reps, seed)
    return {key: {name: (float(points[key][i]), float(intervals[key][0][i]),
                         float(intervals[key][1][i]))
                  for i, name in enumerate(("iqm", "mean"))}
            for key in scores}


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 10_000,
                               seed: int = 0) -> tuple[float, float, float]:
    """P(a run of X scores above a run of Y), averaged over tasks, with its 95% CI."""
    library, metrics = require_rliable()
    points, intervals = _estimates(library, {"xy": [x, y]}, metrics.probability_of_improvement,
                                   reps, seed)
    return tuple(float(np.ravel(v)[0]) for v in (points["xy"], *intervals["xy"]))


def curve_band(values: np.ndarray, statistic: str = "mean", reps: int = 1_000,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A learning curve's `statistic` ("mean" or "iqm") over runs at each point of a
    (runs x points) array, and its pointwise 95% bootstrap interval (runs resampled)."""
    from scipy.stats import trim_mean

    library, _ = require_rliable()

    def stat(x: np.ndarray) -> np.ndarray:
        # Every point at once (the IQM is rliable's 25% trimmed mean, per point here).
        return trim_mean(x, 0.25, axis=0) if statistic == "iqm" else x.mean(axis=0)

    points, intervals = _estimates(library, {"curve": values}, stat, reps, seed)
    return points["curve"], intervals["curve"][0], intervals["curve"][1]


def _estimates(library: Any, scores: dict[str, Any], func: Any, reps: int,
               seed: int) -> tuple[dict, dict]:
    """rliable's `get_interval_estimates`, seeded; arch's notice that it will replace
    RandomState (rliable passes one) is not the user's to act on."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="arch")
        return library.get_interval_estimates(scores, func, reps=reps,
                                              random_state=np.random.RandomState(seed))
