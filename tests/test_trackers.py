"""`--logger wandb|mlflow|tensorboard|csv`: W&B (offline mode: its run directory) and MLflow
(a SQLite store in the logdir) get a real run's CSV rows, its record and its final figures,
and a resumed run continues the same tracker runs. Nothing reaches a network."""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from launch.experiment import Experiment
from launch.studies.sweeps import tracker_environment
from seed_agents.utils.trackers import CSVFollower, check_loggers, thin

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--env", "fake:obs=4,len=20", "--set", "unroll_length=5", "--set", "batch_size=4",
         "--set", "queue_size=16", "--set", "hidden_sizes=16,", "--evaluate-every-s", "0",
         "--runners", "1", "--envs-per-runner", "2", "--log-every-s", "0.2"]


def _train(logdir: Path, *args: str) -> subprocess.CompletedProcess:
    """`seed-agents train` in its own process: W&B's service process ends with it."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_PROJECT": "tests"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_RUN_GROUP"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "launch.commands.cli", "train", "--agent", "vtrace", *SMALL,
         "--logdir", str(logdir), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _wandb_records(logdir: Path) -> list:
    """Every record of every W&B offline run file under the logdir, oldest run first."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    records = []
    for path in sorted(glob.glob(str(logdir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        store = datastore.DataStore()
        store.open_for_scan(path)
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            records.append(record)
    return records


def _history(records: list, key: str) -> list[float]:
    values = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                if (item.key or "/".join(item.nested_key)) == key:
                    values.append(json.loads(item.value_json))
    return values


def _summary(records: list) -> dict[str, object]:
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return summary


def _mlflow(logdir: Path):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{logdir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("seed-agents").experiment_id])
    return client, run


def _sent_once_in_order(sent: list[float], logdir: Path, first_piece_bytes: int) -> None:
    """The tracker's train rows (their env steps, in the order sent) are rows of
    train.csv, in its order, none sent twice, from both pieces: the last row of each
    among them (a row per poll may be thinned out, never a piece's last). The first
    piece's rows are train.csv's first `first_piece_bytes` (its offset in trackers.json
    as that piece ended): how many rows a piece writes depends on the machine's speed
    (a fast one may pass its budget before the first row), so no step count marks it."""
    with open(logdir / "train.csv", "rb") as f:
        first_piece = f.read(first_piece_bytes).decode()
        f.seek(0)
        everything = f.read().decode()
    first = [float(row["env_steps"]) for row in csv.DictReader(io.StringIO(first_piece))]
    written = [float(row["env_steps"]) for row in csv.DictReader(io.StringIO(everything))]
    assert first and len(written) > len(first), "a piece wrote no train rows"
    assert sent == sorted(sent), "rows out of order"
    extra = Counter(sent) - Counter(written)
    assert not extra, f"rows sent twice or never written: {extra}"
    assert first[-1] in sent and sent[-1] == written[-1] >= 800


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """A run of 400 env steps logged to W&B and MLflow (no TensorBoard), then resumed to
    800: its logdir and the two pieces' outputs."""
    logdir = tmp_path_factory.mktemp("tracked") / "run"
    trackers = ("--logger", "wandb", "--logger", "mlflow", "--logger", "csv")
    first = _train(logdir, "--steps", "400", *trackers)
    assert first.returncode == 0, first.stderr[-3000:]
    ids = json.loads((logdir / "trackers.json").read_text())
    second = _train(logdir, "--steps", "800", "--resume", *trackers)
    assert second.returncode == 0, second.stderr[-3000:]
    return logdir, ids


def test_wandb_gets_every_logs_rows_the_config_and_the_final_figures(tracked):
    logdir, ids = tracked
    records = _wandb_records(logdir)
    assert len(glob.glob(str(logdir / "wandb" / "offline-run-*"))) == 2  # one per piece
    runs = {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"}
    assert runs == {ids["wandb"]["run_id"]}  # the resumed piece continued the same run
    _sent_once_in_order(_history(records, "train/env_steps"), logdir,
                        ids["wandb"]["offsets"]["train"])
    assert _history(records, "learner/loss") and _history(records, "rates/env_steps_per_s")
    config = {}
    for record in records:
        if record.WhichOneof("record_type") == "run":
            config.update({item.key: json.loads(item.value_json)
                           for item in record.run.config.update})
    assert config["config"]["hidden_sizes"] == [16] and config["environment"].startswith("fake:")
    summary = _summary(records)
    result = json.loads((logdir / "result.json").read_text())  # the run's own final figures
    assert summary["final/env_steps"] == result["env_steps"] >= 800
    assert summary["final/mean_return"] == pytest.approx(result["mean_return"])
    assert "step budget" in summary["final/stop_reason"]
    assert not (logdir / "tb").exists()  # --logger without tensorboard: none written


def test_mlflow_gets_the_same_rows_params_and_final_figures(tracked):
    logdir, ids = tracked
    client, run = _mlflow(logdir)
    assert run.info.run_id == ids["mlflow"]["run_id"] and run.info.status == "FINISHED"
    assert run.data.params["config.learning_rate"] and run.data.params["builder"].endswith(
        "VTraceBuilder")
    history = sorted(client.get_metric_history(run.info.run_id, "train/env_steps"),
                     key=lambda m: (m.step, m.timestamp))
    _sent_once_in_order([m.step for m in history], logdir, ids["mlflow"]["offsets"]["train"])
    assert all(m.value == m.step for m in history)
    assert client.get_metric_history(run.info.run_id, "learner/loss")
    result = json.loads((logdir / "result.json").read_text())
    assert run.data.metrics["final/env_steps"] == result["env_steps"]
    assert run.data.tags["final.stop_reason"].startswith("step budget")


def test_a_missing_extra_or_a_bad_name_is_refused_before_anything_starts(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="unknown logger"):
        check_loggers(["csv", "neptune"])
    assert check_loggers(["csv", "wandb", "csv"]) == ("csv", "wandb")
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what Python does for an absent module
    with pytest.raises(ValueError, match=r"pip install 'seed-agents\[mlflow\]'"):
        check_loggers(["mlflow"])
    from builders.vtrace import VTraceBuilder
    with pytest.raises(ValueError, match="logdir on this machine"):
        Experiment(VTraceBuilder(), "fake:obs=4", loggers=("wandb",), logdir="gs://b/run")
    result = _train(tmp_path / "run", "--steps", "100", "--logger", "neptune")
    assert result.returncode == 2 and "invalid choice: 'neptune'" in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_follower_reads_complete_rows_only_and_continues_from_its_offset(tmp_path):
    path = tmp_path / "learner.csv"
    follower = CSVFollower(str(path))
    assert follower.new_rows() == []  # no file yet
    with open(path, "w") as f:
        f.write("env_steps,loss\n1,0.5\n2,0.")
        f.flush()
        assert follower.new_rows() == [{"env_steps": "1", "loss": "0.5"}]
        f.write("25\n")
    assert follower.new_rows() == [{"env_steps": "2", "loss": "0.25"}]
    again = CSVFollower(str(path), follower.offset)  # a resumed run's follower
    with open(path, "a") as f:
        f.write("3,0.125\n")
    assert again.new_rows() == [{"env_steps": "3", "loss": "0.125"}]
    rows = [{"env_steps": float(i)} for i in range(100)]
    kept = thin(rows, 5)
    assert len(kept) == 5 and kept[-1] is rows[-1] and kept == sorted(
        kept, key=lambda r: r["env_steps"])


def test_a_followed_file_written_by_another_thread_arrives_whole(tmp_path):
    path = tmp_path / "train.csv"
    rows = 2000
    done = threading.Event()

    def write():
        with open(path, "w") as f:
            f.write("env_steps,mean_return\n")
            for i in range(rows):
                f.write(f"{i},{i / 7}\n")  # unflushed writes tear lines at buffer edges
            done.set()

    writer = threading.Thread(target=write)
    follower, seen = CSVFollower(str(path)), []
    writer.start()
    while not done.is_set():
        seen.extend(follower.new_rows())
    writer.join()
    seen.extend(follower.new_rows())
    assert [int(r["env_steps"]) for r in seen] == list(range(rows))


def test_a_sweeps_runs_share_one_group_and_one_mlflow_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("WANDB_RUN_GROUP", "mine")
    env = tracker_environment(str(tmp_path / "lr-sweep"))
    assert env["WANDB_RUN_GROUP"] == "mine"  # the user's own choice wins
    assert env["MLFLOW_EXPERIMENT_NAME"] == "lr-sweep"
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path / 'lr-sweep' / 'mlflow.db'}"
