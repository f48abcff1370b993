"""Experiment trackers: Weights & Biases and MLflow, fed from a run's CSV logs.

A run's metrics are written by its nodes, each in its own process and perhaps on its own
machine, as CSV files in the logdir (`train`, `learner`, `rates`, `evaluator`). The
trackers do not reach into the nodes: one thread in the driver follows those files and
sends their new rows on (`RunTrackers`). So a node needs no tracker client and no network
access to W&B, one tracker run holds the whole program's metrics, and what a tracker shows
is what the CSVs hold. Rows are keyed by env steps (the `env_steps` column every one of
those files has).

A resumed run continues its tracker runs: their ids and how far each file was sent are kept
in `<logdir>/trackers.json`, written after every batch, so that a piece stopped and resumed
sends every row once.

The clients are optional extras (`pip install 'seed-agents[wandb]'`, `'seed-agents[mlflow]'`)
and are imported only when a run asks for them. Both work without a network: W&B with
`WANDB_MODE=offline` (a run directory under `<logdir>/wandb/`, for `wandb sync`), MLflow
with a database file in the logdir (`sqlite:///<logdir>/mlflow.db`) unless
`MLFLOW_TRACKING_URI` names a server. (MLflow 3 refuses its old `./mlruns` file store
unless told to allow it; SQLite is the local store it recommends.)
"""

from __future__ import annotations

import abc
import csv
import io
import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
"""What `--logger` may name. CSV is always written: it is the run's own record, which
`plot`, `compare`, sweeps and resuming read; naming it changes nothing."""
DEFAULT_LOGGERS = ("csv", "tensorboard")
TRACKERS = {"wandb": "wandb", "mlflow": "mlflow"}
"""Tracker name -> the module its extra provides."""
FOLLOWED = ("train", "learner", "rates", "evaluator")
"""The CSV logs (`<logdir>/<name>.csv`) whose rows the trackers get, under `<name>/`."""
STATE_FILE = "trackers.json"
MAX_ROWS_PER_POLL = 5
"""Rows of one file sent per poll at most, evenly spaced, the newest always among them: the
learner writes a row per step (hundreds a second on CartPole), which a tracker neither
needs nor, for MLflow's database, keeps up with (TensorBoard gets one a second likewise)."""


def check_loggers(names: Sequence[str]) -> tuple[str, ...]:
    """`names` validated, without repeats, in their order.

    Raises:
      ValueError: For a name not in `LOGGERS`, or a tracker whose extra is not installed
        (the message names the pip command).
    """
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise ValueError(f"unknown logger(s) {unknown}: choose from {', '.join(LOGGERS)}.")
    for name in names:
        if name in TRACKERS:
            try:
                __import__(TRACKERS[name])
            except ImportError:
                raise ValueError(f"--logger {name} needs its extra: "
                                 f"pip install 'seed-agents[{name}]'") from None
    return tuple(dict.fromkeys(names))


def numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's finite numeric values (CSV cells are strings; empty and NaN cells go)."""
    out = {}
    for key, value in row.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[key] = number
    return out


class Tracker(abc.ABC):
    """One run in an experiment tracker."""

    run_id: str

    @abc.abstractmethod
    def log(self, source: str, rows: Sequence[Mapping[str, float]]) -> None:
        """Sends rows of one CSV log (numbers only, each with the run's step key)."""

    @abc.abstractmethod
    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        """Records the run's final figures and ends the tracker's run."""


class WandbTracker(Tracker):
    """A W&B run in `<logdir>/wandb/`, project `$WANDB_PROJECT` (default "seed-agents").

    Each file's metrics are plotted against its own step column (`env_steps`: W&B's
    `define_metric`), since the files' rows arrive interleaved and W&B's own step must
    only grow."""

    def __init__(self, logdir: str, config: Mapping[str, Any], run_id: str | None,
                 step_key: str):
        import wandb

        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "seed-agents"),
                               dir=logdir, name=os.path.basename(os.path.normpath(logdir)),
                               id=run_id, resume="allow", config=dict(config),
                               # The console stays the run's own (its progress line
                               # redraws in place); its output is in the logdir.
                               settings=wandb.Settings(console="off"))
        for source in FOLLOWED:
            self._run.define_metric(f"{source}/{step_key}")
            self._run.define_metric(f"{source}/*", step_metric=f"{source}/{step_key}")
        self.run_id = self._run.id

    def log(self, source: str, rows: Sequence[Mapping[str, float]]) -> None:
        for row in rows:
            self._run.log({f"{source}/{key}": value for key, value in row.items()})

    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        self._run.summary.update({f"final/{key}": value for key, value in summary.items()})
        self._run.finish(exit_code=1 if failed else 0)


class MlflowTracker(Tracker):
    """An MLflow run in experiment `$MLFLOW_EXPERIMENT_NAME` (default "seed-agents"), at
    `$MLFLOW_TRACKING_URI` or `sqlite:///<logdir>/mlflow.db`: the config as flattened
    params (`config.learning_rate`), metrics with MLflow's step = the step column."""

    def __init__(self, logdir: str, config: Mapping[str, Any], run_id: str | None,
                 step_key: str):
        import mlflow

        self._step_key = step_key
        uri = os.environ.get("MLFLOW_TRACKING_URI") or (
            "sqlite:///" + os.path.abspath(os.path.join(logdir, "mlflow.db")))
        self._client = mlflow.MlflowClient(tracking_uri=uri)
        if run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "seed-agents")
            experiment = self._client.get_experiment_by_name(name)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._client.create_experiment(name))
            run_name = os.path.basename(os.path.normpath(logdir))
            run_id = self._client.create_run(experiment_id, run_name=run_name).info.run_id
            params = flatten(config)
            self._batch(run_id, params=[mlflow.entities.Param(key, str(value)[:6000])
                                        for key, value in params.items()])
        else:  # a resumed run: its params stand (MLflow refuses to change one)
            self._client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def _batch(self, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = ()) -> None:
        # log_batch takes at most 1,000 metrics and 100 params a call.
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(run_id, metrics=list(metrics[start:start + 1000]))
        for start in range(0, len(params), 100):
            self._client.log_batch(run_id, params=list(params[start:start + 100]))

    def log(self, source: str, rows: Sequence[Mapping[str, float]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._batch(self.run_id, metrics=[
            Metric(f"{source}/{key}", value, now, int(row[self._step_key]))
            for row in rows for key, value in row.items()])

    def finish(self, summary: Mapping[str, Any], failed: bool) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._batch(self.run_id, metrics=[Metric(f"final/{key}", value, now, 0)
                                          for key, value in numbers(summary).items()])
        for key, value in summary.items():
            if isinstance(value, str):
                self._client.set_tag(self.run_id, f"final.{key}", value[:5000])
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys: {"config": {"lr": 1}} -> {"config.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class CSVFollower:
    """The complete rows appended to a CSV file since the last read, from a byte offset
    (the file is another process's, still being written: a half-written last line waits
    for the next read). A file found shorter than the offset was started afresh, and is
    read from its beginning."""

    def __init__(self, path: str, offset: int = 0):
        self.path, self.offset = path, offset
        self._header: list[str] | None = None

    def new_rows(self) -> list[dict[str, str]]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # written afresh since
                    self.offset, self._header = 0, None
                if self._header is None:
                    first = f.readline()
                    if not first.endswith(b"\n"):
                        return []
                    self._header = next(csv.reader([first.decode()]))
                    self.offset = max(self.offset, len(first))
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        reader = csv.reader(io.StringIO(complete.decode()))
        return [dict(zip(self._header, cells, strict=False)) for cells in reader if cells]


def thin(rows: Sequence[Mapping[str, float]], most: int) -> list[Mapping[str, float]]:
    """At most `most` of `rows`, evenly spaced, the last one always kept."""
    if len(rows) <= most:
        return list(rows)
    step = len(rows) / most
    return [rows[len(rows) - 1 - int(i * step)] for i in reversed(range(most))]


class RunTrackers:
    """The trackers of the run in `logdir` and the thread that feeds them its CSV logs.

    Opened by the driver as the run starts (its `run.json` written), closed with the run's
    final figures. Rows are sent against `step_key` (an offline run's: "learner_steps");
    rows without it are skipped. With `resume`, the tracker runs of `trackers.json`
    continue where their rows stopped; otherwise new runs start and every file is sent
    from its first row.
    A tracker that fails (its service unreachable, say) costs the run its tracking, never
    the run: the error is printed once and that tracker is dropped.
    """

    def __init__(self, names: Sequence[str], logdir: str, config: Mapping[str, Any],
                 resume: bool = False, step_key: str = "env_steps", poll_s: float = 2.0,
                 stream: Any = None):
        self._poll_s, self._stream, self._step_key = poll_s, stream, step_key
        self._state_path = os.path.join(logdir, STATE_FILE)
        state = self._read_state() if resume else {}
        kinds = {"wandb": WandbTracker, "mlflow": MlflowTracker}
        self._trackers: dict[str, Tracker] = {}
        self._followers: dict[str, dict[str, CSVFollower]] = {}
        for name in names:
            if name not in kinds:
                continue
            previous = state.get(name, {})
            self._trackers[name] = kinds[name](logdir, config, previous.get("run_id"), step_key)
            offsets = previous.get("offsets", {}) if previous.get("run_id") else {}
            self._followers[name] = {
                source: CSVFollower(os.path.join(logdir, f"{source}.csv"), offsets.get(source, 0))
                for source in FOLLOWED}
        self._write_state()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True, name="trackers")
        self._thread.start()

    @property
    def run_ids(self) -> dict[str, str]:
        return {name: tracker.run_id for name, tracker in self._trackers.items()}

    def _read_state(self) -> dict[str, Any]:
        try:
            with open(self._state_path) as f:
                state = json.load(f)
        except (FileNotFoundError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _write_state(self) -> None:
        state = {name: {"run_id": tracker.run_id,
                        "offsets": {s: f.offset for s, f in self._followers[name].items()}}
                 for name, tracker in self._trackers.items()}
        temporary = self._state_path + ".tmp"
        with open(temporary, "w") as f:
            json.dump(state, f)
        os.replace(temporary, self._state_path)

    def _follow(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.send_new_rows()

    def send_new_rows(self) -> None:
        """Sends each tracker the rows written since its last batch."""
        with self._lock:
            for name in list(self._trackers):
                try:
                    for source, follower in self._followers[name].items():
                        rows = [r for r in map(numbers, follower.new_rows()) if self._step_key in r]
                        if rows:
                            self._trackers[name].log(source, thin(rows, MAX_ROWS_PER_POLL))
                except Exception as error:  # noqa: BLE001 - a tracker never ends the run
                    self._drop(name, error)
            self._write_state()

    def _drop(self, name: str, error: BaseException) -> None:
        print(f"seed-agents: the {name} tracker failed and stops for this run: "
              f"{type(error).__name__}: {error}", file=self._stream, flush=True)
        del self._trackers[name]

    def close(self, summary: Mapping[str, Any], failed: bool = False) -> None:
        """Sends the last rows and the final figures, and ends the tracker runs."""
        self._stop.set()
        self._thread.join()
        self.send_new_rows()
        for name in list(self._trackers):
            try:
                self._trackers[name].finish(summary, failed)
            except Exception as error:  # noqa: BLE001
                self._drop(name, error)
