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

import csv
import dataclasses
import json
import math
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from launch.run_record import read_run_record
from seed_agents.utils import storage

_EVAL_WINDOW = 5
_GROUP_SETTINGS = ("num_runners", "envs_per_runner", "inference")
RESULT_FILE = "result.json"  # what `seed-agents train` leaves when a run ends by its limits
STATS_EXTRA = "pip install 'seed-agents[stats]'"


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
    try:
        return float(read_run(logdir).mean_return[-1]), False
    except ValueError:
        return None


def write_result(logdir: str, result: Any) -> None:
    """Writes a finished run's `RunResult` as `logdir/result.json`, whole or not at all."""
    path = os.path.join(logdir, RESULT_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(dataclasses.asdict(result), f, indent=1, default=float)
    os.replace(path + ".tmp", path)


def read_result(logdir: str) -> dict[str, Any] | None:
    path = os.path.join(logdir, RESULT_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


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
