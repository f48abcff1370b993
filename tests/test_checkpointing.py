"""Checkpoints: the Checkpointer, replay checkpoints, and a run killed and resumed for real."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import reverb
import tensorflow as tf

from builders.vtrace import VTraceBuilder
from launch.backends.local_mp import run_local_mp
from launch.experiment import Experiment
from seed_agents import core
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.envs import environment_factory
from seed_agents.specs import make_environment_spec
from seed_agents.utils import checkpointing
from seed_agents.utils.checkpointing import Checkpointer, ReplayCheckpointer, run_learner
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import CSVLogger

ROOT = Path(__file__).resolve().parents[1]


def _model() -> dict:
    """A layer, an Adam optimizer with slots after one update, and a step variable."""
    layer = tf.keras.layers.Dense(3)
    layer.build((None, 2))
    optimizer = tf.keras.optimizers.Adam(0.1)
    gradients = [tf.random.normal(v.shape) for v in layer.trainable_variables]
    optimizer.apply_gradients(zip(gradients, layer.trainable_variables, strict=True))
    step = tf.Variable(0, dtype=tf.int64)
    return {"layer": layer, "optimizer": optimizer, "step": step}


def _values(objects: dict) -> list[np.ndarray]:
    return [np.array(v) for v in [*objects["layer"].variables, *objects["optimizer"].variables,
                                  objects["step"]]]


# --- Checkpointer ------------------------------------------------------------------------


def test_checkpointer_round_trip_of_variables_slots_step_and_counts(tmp_path):
    saved = _model()
    saved["step"].assign(41)
    counter = Counter()
    counter.increment(env_steps=12_345, learner_steps=41)
    checkpointer = Checkpointer(saved, tmp_path, counter)
    assert not checkpointer.restore_latest() and checkpointer.latest is None
    path = checkpointer.save()
    assert checkpointer.latest == path and checkpointer.step == 41

    restored, restored_counter = _model(), Counter()  # different random values
    restored_counter.increment(env_steps=1)
    assert Checkpointer(restored, tmp_path, restored_counter).restore_latest()
    for a, b in zip(_values(saved), _values(restored), strict=True):
        np.testing.assert_array_equal(a, b)
    assert restored_counter.get_counts() == {"env_steps": 12_345, "learner_steps": 41}
    info = checkpointing.latest_checkpoint_info(tmp_path)
    assert info.step == 41 and info.counts["env_steps"] == 12_345 and info.path == path


def test_a_checkpoint_cut_off_mid_write_is_never_the_one_restored(tmp_path):
    # A machine that dies while saving leaves the new checkpoint's files half written;
    # the state file that names the newest checkpoint is replaced (write, then rename)
    # only once they are complete, so the previous checkpoint is restored.
    saved = _model()
    saved["step"].assign(7)
    path = Checkpointer(saved, tmp_path).save()
    for suffix in (".index", ".data-00000-of-00001"):
        Path(f"{path}{suffix}").with_name(f"ckpt-99{suffix}").write_bytes(b"\x00" * 10)
    info = checkpointing.latest_checkpoint_info(tmp_path)
    assert info.path == path and info.step == 7
    restored = _model()
    assert Checkpointer(restored, tmp_path).restore_latest()
    assert int(restored["step"].numpy()) == 7
    # A Reverb checkpoint without its DONE file (cut off) is no checkpoint either.
    replay = tmp_path / "replay"
    (replay / "2026-11-25T00:00:00.000000000").mkdir(parents=True)
    assert not checkpointing.has_replay_checkpoint(replay)


def test_checkpointer_saves_on_its_timer_and_keeps_the_newest(tmp_path):
    # An interval long enough that no scheduling hiccup of a loaded machine spans it
    # between two calls a line apart.
    checkpointer = Checkpointer(_model(), tmp_path, every_s=2.0, max_to_keep=2)
    assert checkpointer.maybe_save() is None  # the interval starts at construction
    time.sleep(2.05)
    first = checkpointer.maybe_save()
    assert first is not None and checkpointer.maybe_save() is None
    checkpointer.save()
    checkpointer.save()
    assert not Path(first + ".index").exists()
    assert len(list(tmp_path.glob("ckpt-*.index"))) == 2
    assert Checkpointer(_model(), tmp_path / "other", every_s=None).maybe_save() is None


def test_checkpointer_rejects_a_checkpoint_of_another_shape(tmp_path):
    Checkpointer(_model(), tmp_path).save()
    other = _model()
    other["layer"] = tf.keras.layers.Dense(5)
    other["layer"].build((None, 2))
    with pytest.raises(ValueError, match="does not fit"):
        Checkpointer(other, tmp_path).restore_latest()
    with pytest.raises(ValueError, match="counts"):
        Checkpointer({"counts": tf.Variable(1)}, tmp_path)


class _CountingLearner(core.Learner):
    """Steps a variable; `fail_at` makes that step raise."""

    def __init__(self, stop_at: int, stop: threading.Event, fail_at: int | None = None):
        self.step_variable = tf.Variable(0, dtype=tf.int64)
        self._stop_at, self._stop, self._fail_at = stop_at, stop, fail_at

    def step(self) -> dict[str, float]:
        if int(self.step_variable.numpy()) == self._fail_at:
            raise RuntimeError("boom")
        self.step_variable.assign_add(1)
        if int(self.step_variable.numpy()) >= self._stop_at:
            self._stop.set()
        return {}

    def get_variables(self, names):
        return []

    def checkpoint_objects(self):
        return {"step": self.step_variable}


def test_run_learner_saves_on_the_timer_and_at_the_end_but_not_after_an_error(tmp_path):
    stop = threading.Event()
    learner = _CountingLearner(stop_at=50, stop=stop)
    run_learner(learner, stop, Checkpointer(learner.checkpoint_objects(), tmp_path))
    assert checkpointing.latest_checkpoint_info(tmp_path).step == 50

    stop = threading.Event()
    learner = _CountingLearner(stop_at=10**9, stop=stop, fail_at=30)
    checkpointer = Checkpointer(learner.checkpoint_objects(), tmp_path / "failed", every_s=None)
    with pytest.raises(RuntimeError, match="boom"):
        run_learner(learner, stop, checkpointer)
    assert checkpointer.latest is None


def test_vtrace_learner_checkpoint_objects_restore_step_network_and_optimizer(tmp_path):
    config = VTraceConfig(unroll_length=3, batch_size=2, queue_size=8, hidden_sizes=(8,))
    builder = VTraceBuilder(config)
    spec = make_environment_spec(environment_factory("fake:obs=4")(0))
    networks = builder.make_networks(spec)
    replay = reverb.Server(builder.make_replay_tables(spec, builder.make_policy(networks, spec)),
                           port=None)
    learners = []  # closed while the replay is up (their dataset streams)
    try:
        address = f"localhost:{replay.port}"
        learner = builder.make_learner(networks, address)
        learners.append(learner)
        objects = learner.checkpoint_objects()
        variables = networks.trainable_variables
        objects["optimizer"].apply_gradients(
            zip([tf.ones_like(v) for v in variables], variables, strict=True))
        objects["step"].assign(7)
        Checkpointer(objects, tmp_path).save()
        fresh = builder.make_learner(builder.make_networks(spec), address)
        learners.append(fresh)
        assert fresh.num_steps == 0
        fresh_objects = fresh.checkpoint_objects()
        assert Checkpointer(fresh_objects, tmp_path).restore_latest()
        assert fresh.num_steps == 7 and fresh.save()["num_steps"] == 7
        for a, b in zip(networks.variables, fresh.network.variables, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        for a, b in zip(objects["optimizer"].variables, fresh_objects["optimizer"].variables,
                        strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    finally:
        for learner in learners:
            learner.close()
        replay.stop()


# --- Replay checkpoints ------------------------------------------------------------------


def _table() -> reverb.Table:
    return reverb.Table(name="t", sampler=reverb.selectors.Uniform(),
                        remover=reverb.selectors.Fifo(), max_size=100,
                        rate_limiter=reverb.rate_limiters.MinSize(1))


def test_replay_checkpointer_checkpoints_on_its_timer_and_a_new_server_loads_it(tmp_path):
    directory = checkpointing.replay_directory(tmp_path)
    metadata = Path(checkpointing.replay_metadata_path(tmp_path))
    server = reverb.Server([_table()], port=None,
                           checkpointer=reverb.checkpointers.DefaultCheckpointer(directory))
    try:
        client = server.localhost_client()
        for i in range(5):
            client.insert(np.full(3, i, np.float32), {"t": 1.0})
        saver = ReplayCheckpointer(client, metadata, every_s=0.2)
        deadline = time.monotonic() + 60
        while not metadata.exists():
            assert time.monotonic() < deadline, "no timer checkpoint"
            time.sleep(0.05)
        client.insert(np.zeros(3, np.float32), {"t": 1.0})
        saver.close()  # the last checkpoint has all 6 items
    finally:
        server.stop()
    written = json.loads(metadata.read_text())
    assert written["items"] == {"t": 6}
    # Reverb keeps one checkpoint, the one the metadata names.
    assert os.listdir(directory) == [os.path.basename(written["path"])]
    assert checkpointing.has_replay_checkpoint(directory)
    server = reverb.Server([_table()], port=None,
                           checkpointer=reverb.checkpointers.DefaultCheckpointer(directory))
    try:
        assert checkpointing.replay_items(server.localhost_client()) == 6
    finally:
        server.stop()


# --- Run directories, experiments, CSV logs ----------------------------------------------


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_check_resume_refuses_to_overwrite_and_to_resume_nothing(tmp_path):
    checkpointing.check_resume(tmp_path, resume=False)  # a fresh logdir is fine
    with pytest.raises(ValueError, match="no learner checkpoint"):
        checkpointing.check_resume(tmp_path, resume=True)
    Checkpointer(_model(), checkpointing.learner_directory(tmp_path)).save()
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "checkpoints"))) as error:
        checkpointing.check_resume(tmp_path, resume=False)
    assert "resume=True (--resume)" in str(error.value) and "another logdir" in str(error.value)
    checkpointing.check_resume(tmp_path, resume=True)
    assert _snapshot(tmp_path) == before


def test_experiment_validates_checkpoint_settings(tmp_path):
    builder = VTraceBuilder()
    with pytest.raises(ValueError, match="checkpoint_every_s"):
        Experiment(builder, "fake:obs=4", checkpoint_every_s=-1)
    with pytest.raises(ValueError, match="logdir"):
        Experiment(builder, "fake:obs=4", resume=True)
    assert not Experiment(builder, "fake:obs=4").checkpointing  # no logdir
    assert not Experiment(builder, "fake:obs=4", logdir=str(tmp_path),
                          checkpoint_every_s=0).checkpointing
    assert Experiment(builder, "fake:obs=4", logdir=str(tmp_path)).checkpointing


def test_csv_logger_appends_under_the_old_header_and_cuts_a_torn_row(tmp_path):
    logger = CSVLogger(tmp_path, "learner")
    logger.write({"a": 1, "b": 2})
    logger.close()
    with open(tmp_path / "learner.csv", "a") as f:
        f.write("3,")  # a row cut short by a kill
    logger = CSVLogger(tmp_path, "learner", append=True)
    logger.write({"b": 5, "a": 4})
    logger.close()
    with open(tmp_path / "learner.csv") as f:
        assert list(csv.DictReader(f)) == [{"a": "1", "b": "2"}, {"a": "4", "b": "5"}]
    logger = CSVLogger(tmp_path, "new", append=True)  # no file yet: a header first
    logger.write({"x": 1})
    logger.close()
    assert (tmp_path / "new.csv").read_text().splitlines() == ["x", "1"]


# --- A run killed and resumed ------------------------------------------------------------

_SCRIPT = '''
import sys

from builders.r2d2 import R2D2Builder
from launch.experiment import Experiment
from launch.backends.local_mp import run_local_mp
from seed_agents.agents.r2d2.config import R2D2Config

if __name__ == "__main__":
    logdir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # R2D2: its prioritized replay is checkpointed beside the learner (target network too).
    config = R2D2Config(burn_in=2, trace_length=4, sequence_period=3, batch_size=4,
                        replay_size=32, min_replay_size=8, samples_per_insert=4.0,
                        num_eval_envs=1, hidden_sizes=(16,), lstm_size=8, head_hidden_size=8)
    experiment = Experiment(
        builder=R2D2Builder(config), environment="fake:obs=4,actions=2,len=50",
        num_runners=1, envs_per_runner=4, max_env_steps=steps, logdir=logdir,
        log_every_s=0.5, evaluate_every_s=None, checkpoint_every_s=1.0,
        resume=mode == "resume")
    print(run_local_mp(experiment).summary(), flush=True)
'''


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry))
    return members


def _start(args: list[str], cwd: Path, env: dict, out: Path) -> subprocess.Popen:
    """A Python process in a process group of its own, output to `out`.

    A process group, not a session: Linux schedules each session as one group
    (autogroup), and beside two busy loops a new session's processes got about 2% of a
    core where the suite's own got 50% (its run's learner logged 10 minutes in).
    """
    with open(out, "w") as f:
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=f,
                                stderr=subprocess.STDOUT, process_group=0)


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILLs every process of `process`'s group and waits until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    _wait(lambda: not _group_members(process.pid), 60, "the run's processes to go")


def _count_reverb_items(checkpoint: Path) -> int:
    # Reverb 0.14 writes one ZLIB-compressed TFRecord per item into items.tfrecord.
    records = tf.data.TFRecordDataset(str(checkpoint / "items.tfrecord"), compression_type="ZLIB")
    return sum(1 for _ in records)


def _wait(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def test_a_killed_run_resumes_its_learner_counts_and_replay(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    logdir = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    learner_dir = Path(checkpointing.learner_directory(logdir))
    replay_dir = Path(checkpointing.replay_directory(logdir))
    metadata = Path(checkpointing.replay_metadata_path(logdir))

    def stepped_checkpoint():
        try:
            info = checkpointing.latest_checkpoint_info(learner_dir)
        except (tf.errors.NotFoundError, ValueError):  # rotated away while we read it
            return None
        return info if info is not None and info.step else None

    def full_replay_checkpoint():
        try:
            return json.loads(metadata.read_text())["items"]["unrolls"] == 32
        except (OSError, ValueError):
            return False

    first = _start([str(script), str(logdir), "1000000000", "new"], tmp_path, env,
                   tmp_path / "first.out")
    try:
        _wait(stepped_checkpoint, 600, "a learner checkpoint after a step")
        _wait(full_replay_checkpoint, 600, "a replay checkpoint of a full table")
    finally:
        _kill_group(first)  # a hard kill: only the timers' checkpoints survive
    assert first.returncode == -signal.SIGKILL

    saved = checkpointing.latest_checkpoint_info(learner_dir)
    # Reverb loads the newest complete one (names are UTC times; a kill may leave two).
    replay_checkpoint = max(p for p in replay_dir.iterdir() if (p / "DONE").exists())
    replay_items = _count_reverb_items(replay_checkpoint)
    assert saved.step > 0 and saved.counts["env_steps"] > 0 and replay_items == 32

    # Without resume the logdir is refused before anything starts, and nothing changes.
    before = _snapshot(logdir)
    with pytest.raises(ValueError, match=re.escape(str(logdir / "checkpoints"))):
        run_local_mp(Experiment(VTraceBuilder(), "fake:obs=4", logdir=str(logdir)))
    assert _snapshot(logdir) == before

    # The resumed run appends to the first run's node logs; its console shows only its
    # own lines (the replay logs this line once per start of its checkpointer).
    opened = "Initializing TFRecordCheckpointer in"
    replay_log = logdir / "logs" / "replay.log"
    first_count = replay_log.read_text().count(opened)
    assert first_count >= 1
    budget = saved.counts["env_steps"] + 1_500
    second = _start([str(script), str(logdir), str(budget), "resume"], tmp_path, env,
                    tmp_path / "second.out")
    try:
        second.wait(600)  # the event is the run ending at its budget; generous on a loaded CPU
    finally:
        _kill_group(second)
    output = (tmp_path / "second.out").read_text()
    assert second.returncode == 0, output[-3000:]
    line = re.search(r"resumed from (\S+): learner step (\d+), env steps (\d+), "
                     r"replay items (\d+)", output)
    assert line, output[-3000:]
    assert line[1] == str(logdir / "checkpoints")
    assert int(line[2]) == saved.step
    assert int(line[3]) == saved.counts["env_steps"]
    assert int(line[4]) == replay_items
    assert "step budget" in output
    assert output.count(opened) == replay_log.read_text().count(opened) - first_count
    # Saved at shutdown; or, when the stop's 10 s ran out before that save on a CPU
    # shared with other work (seen with the suite and two busy loops on 2 cores), the
    # timer's last checkpoint, a few steps earlier.
    final = checkpointing.latest_checkpoint_info(learner_dir)
    assert final.step > saved.step and final.counts["env_steps"] >= budget
    with open(logdir / "learner.csv") as f:  # appended to: the first run's rows stay
        steps = [int(row["learner_steps"]) for row in csv.DictReader(f)]
    assert steps[0] == 1 and steps[-1] >= final.counts["learner_steps"] > saved.step
