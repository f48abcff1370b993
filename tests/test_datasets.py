"""Recorded datasets: the format written and read back, killed recordings, every bad
input named by file, and datasets turned into the replay existing learners sample."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dm_env import specs

from builders.bc import BCBuilder
from builders.vtrace import VTraceBuilder
from seed_agents.agents.bc.config import BCConfig
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.datasets import (
    DatasetError,
    DatasetSpec,
    DatasetWriter,
    EpisodeRecorder,
    RecordingAdder,
    episode_dataset,
    iterate_episodes,
    load_replay,
    open_dataset,
)
from seed_agents.datasets.format import FILE_PATTERN
from seed_agents.envs import environment_factory
from seed_agents.replay import unrolls
from seed_agents.replay.unrolls import unroll_signature
from seed_agents.specs import make_environment_spec

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = "gym:CartPole-v1"
LOGITS = {"logits": specs.Array((2,), np.float32)}


def cartpole_spec():
    env = environment_factory(CARTPOLE)(0)
    try:
        return make_environment_spec(env)
    finally:
        env.close()


def heuristic_action(observation: np.ndarray) -> np.ndarray:
    """A good CartPole controller: push towards where the pole is falling."""
    return (observation[..., 2] + 0.5 * observation[..., 3] > 0).astype(np.int32)


def record_cartpole(path: Path, episodes: int, epsilon: float = 0.0, num_envs: int = 4,
                    seed: int = 0, close: bool = True, extras: bool = True):
    """Records `episodes` episodes of the heuristic with `epsilon` random actions, as the
    inference server would hand them to its adder (rows of several slots per call).
    Returns the recorder and the returns of the written episodes."""
    spec = cartpole_spec()
    writer = DatasetWriter(path, DatasetSpec.of(CARTPOLE, spec, LOGITS if extras else {},
                                                {"source": "test"}))
    recorder = EpisodeRecorder(writer, num_envs, max_episodes=episodes)
    envs = [environment_factory(CARTPOLE)(seed + i) for i in range(num_envs)]
    rng = np.random.default_rng(seed)
    timesteps = [env.reset() for env in envs]
    returns, running = [], np.zeros(num_envs)
    slots = np.arange(num_envs)
    while recorder.episodes < episodes:
        obs = np.stack([t.observation for t in timesteps])
        action = heuristic_action(obs)
        random = rng.random(num_envs) < epsilon
        action = np.where(random, rng.integers(0, 2, num_envs), action).astype(np.int32)
        step_type = np.array([t.step_type for t in timesteps], np.uint8)
        reward = np.array([t.reward or 0.0 for t in timesteps], np.float32)
        rows = {unrolls.OBSERVATION: obs, unrolls.PREV_ACTION: np.zeros_like(action),
                unrolls.REWARD: reward,
                unrolls.DISCOUNT: np.array([1.0 if t.discount is None else t.discount
                                            for t in timesteps], np.float32),
                unrolls.STEP_TYPE: step_type, unrolls.ACTION: action,
                unrolls.EXTRAS: {"logits": np.stack([obs[:, 0], obs[:, 2]], -1)}}
        before = recorder.episodes
        recorder.add(slots, rows)
        running = np.where(step_type == 0, 0.0, running + reward)
        for i in np.flatnonzero(step_type == 2)[:recorder.episodes - before]:
            returns.append(running[i])
        timesteps = [env.reset() if t.last() else env.step(a)
                     for env, t, a in zip(envs, timesteps, action, strict=True)]
    for env in envs:
        env.close()
    if close:
        recorder.close()
    return recorder, returns


@pytest.fixture(scope="module")
def cartpole_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("datasets") / "cartpole"
    _, returns = record_cartpole(path, episodes=12, epsilon=0.3)
    return path, returns


def test_episodes_are_written_whole_and_read_back_with_tf_data(cartpole_dataset):
    path, returns = cartpole_dataset
    spec = json.loads((path / "spec.json").read_text())
    assert spec["format"] == "seed-agents-episodes" and spec["version"] == 1
    assert spec["environment"] == CARTPOLE and spec["complete"] is True
    assert spec["episodes"] == 12 and spec["files"] == {FILE_PATTERN.format(0): 12}
    assert spec["action"] == {"shape": [], "dtype": "int32", "num_values": 2}
    assert spec["extras"] == {"logits": {"shape": [2], "dtype": "float32"}}

    episodes = list(iterate_episodes(path))
    assert [float(e["reward"].sum()) for e in episodes] == pytest.approx(returns)
    assert spec["steps"] == sum(len(e["step_type"]) for e in episodes)
    for episode in episodes:
        step_type = episode["step_type"]
        assert step_type[0] == 0 and step_type[-1] == 2 and (step_type[1:-1] == 1).all()
        assert episode["reward"][0] == 0 and episode["discount"][0] == 1
        # The extras are the rows' own (here observation columns 0 and 2).
        np.testing.assert_array_equal(episode["extras/logits"],
                                      episode["observation"][:, [0, 2]])
    # Plain tf.data reads the same, nested extras and all.
    first = next(iter(episode_dataset(path)))
    assert first["observation"].dtype == tf.float32 and first["action"].dtype == tf.int32
    np.testing.assert_array_equal(first["extras"]["logits"].numpy(),
                                  episodes[0]["extras/logits"])


def test_the_recorder_drops_running_episodes_of_reset_slots_and_joins_at_first(tmp_path):
    spec = cartpole_spec()
    writer = DatasetWriter(tmp_path / "ds", DatasetSpec.of(CARTPOLE, spec, {}))
    recorder = EpisodeRecorder(writer, num_slots=2, chunk=2)  # episodes span chunks

    def rows(step_type, value):
        n = len(step_type)
        return {unrolls.OBSERVATION: np.full((n, 4), value, np.float32),
                unrolls.PREV_ACTION: np.zeros(n, np.int32),
                unrolls.ACTION: np.full(n, int(value) % 2, np.int32),
                unrolls.REWARD: np.ones(n, np.float32), unrolls.DISCOUNT: np.ones(n, np.float32),
                unrolls.STEP_TYPE: np.array(step_type, np.uint8), unrolls.EXTRAS: {}}

    slots = np.array([0, 1])
    recorder.add(slots, rows([1, 0], 1.0))  # slot 0 joined mid-episode: skipped
    recorder.add(slots, rows([2, 1], 2.0))
    recorder.add(slots, rows([0, 1], 3.0))
    recorder.reset(np.array([1]))  # slot 1's runner went away: its episode is dropped
    recorder.add(slots, rows([1, 2], 4.0))
    recorder.add(slots, rows([1, 0], 5.0))
    recorder.add(slots, rows([2, 1], 6.0))
    recorder.add(slots[1:], rows([1], 7.0))  # slot 1's episode is still running at close
    recorder.close()

    episodes = list(iterate_episodes(tmp_path / "ds"))
    assert len(episodes) == 1
    np.testing.assert_array_equal(episodes[0]["observation"][:, 0], [3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(episodes[0]["action"], [1, 0, 1, 0])


def test_a_recording_adder_feeds_the_adder_and_the_recorder(tmp_path):
    spec = cartpole_spec()
    seen = []
    writer = DatasetWriter(tmp_path / "ds", DatasetSpec.of(CARTPOLE, spec, {}))

    class Adder:
        def add(self, slots, rows, states=()):
            seen.append(("add", slots.tolist()))

        def reset(self, slots):
            seen.append(("reset", slots.tolist()))

    adder = RecordingAdder(Adder(), EpisodeRecorder(writer, 1))
    row = {unrolls.OBSERVATION: np.zeros((1, 4), np.float32),
           unrolls.PREV_ACTION: np.zeros(1, np.int32), unrolls.ACTION: np.zeros(1, np.int32),
           unrolls.REWARD: np.zeros(1, np.float32), unrolls.DISCOUNT: np.ones(1, np.float32),
           unrolls.STEP_TYPE: np.zeros(1, np.uint8), unrolls.EXTRAS: {}}
    adder.add(np.array([0]), row)
    adder.add(np.array([0]), {**row, unrolls.STEP_TYPE: np.full(1, 2, np.uint8)})
    adder.reset(np.array([0]))
    adder.recorder.close()
    assert seen == [("add", [0]), ("add", [0]), ("reset", [0])]
    assert open_dataset(tmp_path / "ds").episodes == 1


def test_a_new_dataset_never_overwrites_one(cartpole_dataset):
    path, _ = cartpole_dataset
    before = sorted(os.listdir(path))
    with pytest.raises(ValueError, match="not an empty directory"):
        DatasetWriter(path, DatasetSpec.of(CARTPOLE, cartpole_spec(), {}))
    assert sorted(os.listdir(path)) == before


_KILLED_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from tests.test_datasets import record_cartpole
    # Many episodes of 1-4 KB each, one flushed record at a time, until killed.
    record_cartpole(sys.argv[1], episodes=100_000, epsilon=0.9, close=False)
""")


def test_a_killed_recording_leaves_only_whole_episodes_readable(tmp_path):
    path = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1")
    process = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path), str(ROOT)],
                               env=env)
    try:
        file = path / FILE_PATTERN.format(0)
        deadline = time.monotonic() + 600
        while not (file.exists() and file.stat().st_size > 20_000):
            assert process.poll() is None, "the recording process died"
            assert time.monotonic() < deadline, "no episodes written"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    dataset = open_dataset(path)
    assert dataset.spec.complete is False and dataset.episodes >= 5
    episodes = list(iterate_episodes(path))  # every one checked whole
    assert len(episodes) == dataset.episodes

    # Cut the last record in half, as a kill in the middle of a write would.
    size = file.stat().st_size
    last = episodes[-1]
    with open(file, "r+b") as f:
        f.truncate(size - len(last["step_type"]) * 8)
    with pytest.warns(UserWarning, match="did not finish.*torn episode, ignored"):
        torn = open_dataset(path)
    assert torn.episodes == dataset.episodes - 1
    with pytest.warns(UserWarning):
        assert len(list(iterate_episodes(path))) == dataset.episodes - 1


def _copy(source: Path, target: Path) -> Path:
    target.mkdir()
    for name in os.listdir(source):
        (target / name).write_bytes((source / name).read_bytes())
    return target


def test_a_truncated_file_of_a_complete_dataset_is_an_error_naming_it(cartpole_dataset,
                                                                     tmp_path):
    path = _copy(cartpole_dataset[0], tmp_path / "cut")
    file = path / FILE_PATTERN.format(0)
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(DatasetError, match=f"{file} is truncated: it holds 11 whole episodes"):
        open_dataset(path)


def test_a_corrupted_record_is_an_error_naming_the_file_and_episode(cartpole_dataset,
                                                                    tmp_path):
    path = _copy(cartpole_dataset[0], tmp_path / "corrupt")
    file = path / FILE_PATTERN.format(0)
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte inside some record's data
    file.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=f"{file}, episode [0-9]+ is corrupted"):
        list(iterate_episodes(path))


def test_an_empty_or_missing_dataset_is_an_error_naming_it(tmp_path):
    empty = tmp_path / "empty"
    DatasetWriter(empty, DatasetSpec.of(CARTPOLE, cartpole_spec(), {})).close()
    with pytest.raises(DatasetError, match=f"{empty} holds no whole episode"):
        open_dataset(empty)
    with pytest.raises(DatasetError, match=f"{tmp_path / 'nothing'} does not exist"):
        open_dataset(tmp_path / "nothing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "spec.json").write_text("{\"format\": \"other\"}")
    with pytest.raises(DatasetError, match="spec.json is not a seed-agents dataset spec"):
        open_dataset(tmp_path / "bad")


def test_a_dataset_of_another_environment_or_without_the_agents_extras_is_refused(
        cartpole_dataset, tmp_path):
    path, _ = cartpole_dataset
    other = make_environment_spec(environment_factory("fake:obs=6,actions=3")(0))
    builder = BCBuilder(BCConfig(batch_size=8, hidden_sizes=(8,)))
    policy = builder.make_policy(builder.make_networks(other), other)
    with pytest.raises(DatasetError, match=r"spec.json: the dataset's observations are "
                                           r"\(4,\) float32 .*has \(6,\) float32"):
        load_replay(str(path), builder, other, policy, "fake:obs=6,actions=3")

    no_extras = tmp_path / "no_extras"
    record_cartpole(no_extras, episodes=2, extras=False)
    spec = cartpole_spec()
    vtrace = VTraceBuilder(VTraceConfig(unroll_length=4, batch_size=2, hidden_sizes=(8,)))
    policy = vtrace.make_policy(vtrace.make_networks(spec), spec)
    with pytest.raises(DatasetError, match="VTrace learns from the behaviour policy's "
                                           "extra 'logits'"):
        load_replay(str(no_extras), vtrace, spec, policy, CARTPOLE)


def test_a_dataset_fills_a_v_trace_table_with_the_unrolls_its_learner_trains_on(
        cartpole_dataset):
    path, _ = cartpole_dataset
    spec = cartpole_spec()
    config = VTraceConfig(unroll_length=5, batch_size=4, hidden_sizes=(16,), lstm_size=8)
    builder = VTraceBuilder(config)
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec)
    replay = load_replay(str(path), builder, spec, policy, CARTPOLE)
    try:
        steps = sum(len(e["step_type"]) for e in iterate_episodes(path))
        assert replay.episodes == 12 and replay.steps == steps
        # The episodes ran side by side in 32 slots: each slot's rows make unrolls of
        # T+1 rows overlapping by one; a slot's last partial unroll is not written.
        assert 0 < replay.items <= steps // config.unroll_length
        signature = unroll_signature(spec, 5, policy.extras_spec, policy.state_spec)
        info = replay.server.localhost_client().server_info()[builder.table]
        assert info.signature == tf.nest.map_structure(
            lambda s: tf.TensorSpec(s.shape, s.dtype), signature)
        with contextlib.closing(builder.make_learner(networks, replay.address)) as learner:
            for _ in range(3):
                metrics = learner.step()
        # This dataset's behaviour policy stamped no versions: its rows got -1, "an
        # unknown policy", so there is no policy lag to report; everything else is finite.
        assert np.isnan(metrics.pop("policy_lag"))
        assert metrics and all(np.isfinite(v) for v in metrics.values())
        # The offline table samples uniformly and keeps everything it samples.
        assert replay.server.localhost_client().server_info()[builder.table].current_size \
            == replay.items
    finally:
        replay.server.stop()
