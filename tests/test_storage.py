"""A run whose logdir is a URL (object storage): every file through `seed_agents.utils.storage`.

Two URLs that TensorFlow opens stand in for `gs://`: its in-memory `ram://` (no append,
as an object store; but no glob either, which TensorFlow's checkpoint reader needs) for
the files we write ourselves, and `file://` for a whole run, which goes through
`tf.io.gfile` for every file as `gs://` would. Reverb's checkpoints, which need a local
path, are copied to the URL.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import threading
import uuid

import pytest

from builders.r2d2 import R2D2Builder
from launch.backends.inprocess import run_inprocess
from launch.experiment import Experiment
from launch.run_record import read_run_record
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.utils import checkpointing, storage
from seed_agents.utils.loggers import CSVLogger

R2D2 = R2D2Config(burn_in=2, trace_length=4, sequence_period=3, batch_size=4, replay_size=32,
                  min_replay_size=8, samples_per_insert=4.0, num_eval_envs=1,
                  hidden_sizes=(16,), lstm_size=8, head_hidden_size=8)


@pytest.fixture
def url() -> str:
    return f"ram://seed-agents-test-{uuid.uuid4().hex}/run"


def _rows(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(storage.read_text(path))))


def test_csv_logger_continues_a_url_file_under_its_header_and_cuts_a_torn_row(url):
    logger = CSVLogger(url, "train")
    logger.write({"a": 1, "b": 2})
    logger.close()
    path = storage.join(url, "train.csv")
    storage.write_text(path, storage.read_text(path) + "3,")  # a row cut off by a kill
    logger = CSVLogger(url, "train", append=True)
    logger.write({"b": 5, "a": 4})
    logger.close()
    assert storage.read_text(path) == "a,b\r\n1,2\r\n4,5\r\n"


def test_storage_copies_a_tree_with_its_completion_marker_last(tmp_path, url):
    source = tmp_path / "checkpoint"
    (source / "tables").mkdir(parents=True)
    for name in ("DONE", "a", "tables/b"):
        (source / name).write_text(name)
    order = []
    copy = storage._gfile().copy

    def recording_copy(src, dst, overwrite=False):
        order.append(dst.rsplit("/", 1)[1])
        copy(src, dst, overwrite=overwrite)

    storage._gfile().copy = recording_copy
    try:
        assert storage.copy_tree(source, url, last=("DONE",)) == 3
    finally:
        storage._gfile().copy = copy
    assert order[-1] == "DONE"
    assert storage.read_text(storage.join(url, "tables", "b")) == "tables/b"
    storage.remove_tree(url)
    assert not storage.exists(url)


def test_a_run_on_a_url_logdir_checkpoints_there_and_resumes_from_it(tmp_path):
    url = f"file://{tmp_path}/run"
    experiment = Experiment(
        builder=R2D2Builder(R2D2), environment="fake:obs=4,actions=2,len=50",
        num_runners=1, envs_per_runner=4, max_env_steps=600, logdir=url, log_every_s=0.2,
        evaluate_every_s=None, checkpoint_every_s=1.0)
    first = run_inprocess(experiment, stream=io.StringIO())
    assert "budget" in first.stop_reason
    learner = checkpointing.learner_directory(url)
    replay = checkpointing.replay_directory(url)
    saved = checkpointing.latest_checkpoint_info(learner)
    assert saved is not None and saved.counts["env_steps"] >= 600
    assert checkpointing.complete_replay_checkpoints(replay)
    items = json.loads(storage.read_text(checkpointing.replay_metadata_path(url)))["items"]
    rows_before = len(_rows(storage.join(url, "train.csv")))
    assert rows_before > 0 and storage.isfile(storage.join(url, "learner.csv"))
    # Without resume the URL's checkpoints are refused, as a local logdir's are.
    with pytest.raises(ValueError, match="holds checkpoints of an earlier run"):
        experiment.check_checkpoints()

    stream = io.StringIO()
    second = run_inprocess(dataclasses.replace(experiment, max_env_steps=1_200, resume=True),
                           stream=stream)
    assert "budget" in second.stop_reason and second.env_steps >= 1_200
    said = stream.getvalue()
    assert f"resumed from {url}/checkpoints" in said
    assert f"replay items {sum(items.values())}" in said  # Reverb loaded the copy
    rows = _rows(storage.join(url, "train.csv"))
    assert len(rows) > rows_before
    assert int(rows[rows_before]["env_steps"]) >= saved.counts["env_steps"]
    assert len(read_run_record(url).started) == 2
    assert len(checkpointing.complete_replay_checkpoints(replay)) <= 2  # the newest two


@pytest.mark.parametrize("scheme", ["file://", ""], ids=["url", "local"])
def test_a_reader_never_finds_a_rewritten_file_missing_or_partial(tmp_path, scheme):
    # What a launcher rewrites while others poll it (nodes.json on restarts): a reader
    # gets the old text or the new, never no file (the URL's "w" once removed it first)
    # nor a part; no temporary file is left behind.
    path = f"{scheme}{tmp_path}/nodes.json"
    storage.write_text(path, json.dumps({"n": 0, "pad": "x" * 4096}))
    stop, problems, reads = threading.Event(), [], [0]

    def poll():
        while not stop.is_set():
            try:
                json.loads(storage.read_text(path))
                reads[0] += 1
            except Exception as error:  # noqa: BLE001 - what a reader would hit
                problems.append(repr(error))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for n in range(1, 200):
            storage.write_text(path, json.dumps({"n": n, "pad": "x" * 4096}))
    finally:
        stop.set()
        reader.join(60)
    assert problems == [] and reads[0] > 0
    assert json.loads(storage.read_text(path))["n"] == 199
    assert storage.listdir(f"{scheme}{tmp_path}") == ["nodes.json"]
