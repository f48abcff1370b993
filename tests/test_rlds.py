"""RLDS datasets (`seed_agents.datasets.rlds`): episodes written with TensorFlow Datasets'
RLDS writer and read back field for field, the time alignment of rewards and discounts
both ways, a foreign (D4RL-layout) dataset read as episodes, a dataset of another spec
refused naming both specs, and every broken directory named. No network: every dataset
here is written by the test."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

# The test extra installs TFDS: a missing one fails here rather than skipping the file.
import tensorflow_datasets as tfds
from dm_env import specs

from seed_agents.datasets import DatasetError, DatasetSpec, EpisodeRecorder
from seed_agents.datasets.rlds import (
    RLDSWriter,
    check_rlds_matches,
    iterate_rlds_episodes,
    open_rlds,
    rlds_path,
    write_rlds,
)
from seed_agents.replay import unrolls
from seed_agents.specs import EnvironmentSpec

ENV = "fake:continuous-toy"
LOGITS = {"logits": specs.Array((2,), np.float32)}
SHARD = "seed_agents_episodes-train.tfrecord-00000"


def continuous_spec(observation: int = 3, action: int = 2) -> EnvironmentSpec:
    return EnvironmentSpec(
        observations=specs.Array((observation,), np.float32),
        actions=specs.BoundedArray((action,), np.float32, -1.0, 1.0),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def discrete_spec() -> EnvironmentSpec:
    return EnvironmentSpec(
        observations=specs.Array((3,), np.float32),
        actions=specs.DiscreteArray(4, np.int32),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def hand_made_episode(length: int, terminal: bool, start: float) -> dict[str, np.ndarray]:
    """An episode of our format with known numbers: observation t is [start + t] * 3,
    action t is [t / 10, -t / 10], the reward that arrives with observation t is
    start + t (0 at FIRST), the discount 1 but at a terminal LAST."""
    t = np.arange(length, dtype=np.float32)
    step_type = np.full(length, 1, np.uint8)
    step_type[0], step_type[-1] = 0, 2
    reward = start + t
    reward[0] = 0.0
    discount = np.ones(length, np.float32)
    if terminal:
        discount[-1] = 0.0
    return {"observation": np.repeat((start + t)[:, None], 3, axis=1),
            "action": np.stack([t / 10, -t / 10], axis=1),
            "reward": reward.astype(np.float32),
            "discount": discount,
            "step_type": step_type,
            "extras/logits": np.stack([t, 2 * t], axis=1)}


EPISODES = (hand_made_episode(5, terminal=True, start=10.0),
            hand_made_episode(4, terminal=False, start=20.0),   # a time limit
            hand_made_episode(2, terminal=True, start=30.0))


def dataset_spec(extras=LOGITS) -> DatasetSpec:
    return DatasetSpec.of(ENV, continuous_spec(), extras, {"source": "test"})


@pytest.fixture(scope="module")
def rlds_dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rlds") / "toy"
    assert write_rlds(path, dataset_spec(), EPISODES) == 3
    return path


def test_episodes_round_trip_field_for_field(rlds_dataset):
    assert sorted(os.listdir(rlds_dataset)) == sorted(
        ["dataset_info.json", "features.json", "metadata.json", SHARD])
    dataset = open_rlds(rlds_dataset)
    assert dataset.split == "train" and dataset.episodes == 3
    assert dataset.spec.environment == ENV and dataset.spec.complete is True
    assert dataset.spec.action == {"shape": [2], "dtype": "float32",
                                   "minimum": [-1.0, -1.0], "maximum": [1.0, 1.0]}
    assert dataset.spec.extras == {"logits": {"shape": [2], "dtype": "float32"}}
    assert dataset.spec.steps == 11

    episodes = list(iterate_rlds_episodes(rlds_dataset))
    assert len(episodes) == len(EPISODES)
    for written, read in zip(EPISODES, episodes, strict=True):
        assert set(read) == set(written)
        for name, column in written.items():
            assert read[name].dtype == column.dtype, name
            np.testing.assert_array_equal(read[name], column, err_msg=name)


def test_rlds_steps_hold_the_reward_and_discount_that_follow_their_action(rlds_dataset):
    """What another RLDS reader sees: step t's reward and discount are those that arrived
    with observation t+1; the last step holds the final observation, is_terminal for a
    termination, and an invalid (zero) reward and discount."""
    builder = tfds.builder_from_directory(os.fspath(rlds_dataset))
    assert builder.info.metadata["seed_agents"]["environment"] == ENV
    episodes = list(builder.as_dataset(split="train", shuffle_files=False))
    for ours, episode in zip(EPISODES, episodes, strict=True):
        steps = list(episode["steps"].as_numpy_iterator())
        length = len(ours["step_type"])
        assert len(steps) == length
        for t, step in enumerate(steps):
            np.testing.assert_array_equal(step["observation"], ours["observation"][t])
            np.testing.assert_array_equal(step["action"], ours["action"][t])
            np.testing.assert_array_equal(step["extras"]["logits"], ours["extras/logits"][t])
            assert step["is_first"] == (t == 0) and step["is_last"] == (t == length - 1)
            if t < length - 1:
                assert step["reward"] == ours["reward"][t + 1]
                assert step["discount"] == ours["discount"][t + 1]
                assert not step["is_terminal"]
            else:
                assert step["reward"] == 0.0 and step["discount"] == 0.0
                assert step["is_terminal"] == (ours["discount"][-1] == 0.0)


def test_the_episode_recorder_writes_rlds_through_the_writer_interface(tmp_path):
    """`EpisodeRecorder` feeds an `RLDSWriter` as it feeds a `DatasetWriter`: two slots'
    rows interleaved, episodes written whole as they end."""
    writer = RLDSWriter(tmp_path / "recorded", dataset_spec(extras={}))
    recorder = EpisodeRecorder(writer, num_slots=2, chunk=2)
    first, second = (hand_made_episode(5, True, 10.0), hand_made_episode(3, False, 20.0))
    for t in range(5):
        slots = np.array([0, 1]) if t < 3 else np.array([0])
        parts = [e for e, s in ((first, 0), (second, 1)) if s in slots]
        rows = {unrolls.OBSERVATION: np.stack([e["observation"][t] for e in parts]),
                unrolls.PREV_ACTION: np.zeros((len(parts), 2), np.float32),
                unrolls.REWARD: np.stack([e["reward"][t] for e in parts]),
                unrolls.DISCOUNT: np.stack([e["discount"][t] for e in parts]),
                unrolls.STEP_TYPE: np.stack([e["step_type"][t] for e in parts]),
                unrolls.ACTION: np.stack([e["action"][t] for e in parts]),
                unrolls.EXTRAS: {}}
        recorder.add(slots, rows)
    recorder.close()
    assert writer.episodes == 2 and writer.spec.steps == 8
    episodes = list(iterate_rlds_episodes(tmp_path / "recorded"))
    for written, read in zip((second, first), episodes, strict=True):  # in order of ending
        assert set(read) == set(written) - {"extras/logits"}
        for name in read:
            np.testing.assert_array_equal(read[name], written[name], err_msg=name)


def test_a_new_rlds_dataset_never_overwrites_and_takes_whole_episodes_only(rlds_dataset,
                                                                            tmp_path):
    before = sorted(os.listdir(rlds_dataset))
    with pytest.raises(ValueError, match="not an empty directory"):
        RLDSWriter(rlds_dataset, dataset_spec())
    assert sorted(os.listdir(rlds_dataset)) == before

    writer = RLDSWriter(tmp_path / "new", dataset_spec())
    half = {name: column[:3] for name, column in EPISODES[0].items()}  # no LAST
    with pytest.raises(ValueError, match="Not a whole episode"):
        writer.write(half)
    wrong = dict(EPISODES[0], action=EPISODES[0]["action"][:, :1])
    with pytest.raises(ValueError, match=r"Episode field action is float32\[5, 1\]"):
        writer.write(wrong)
    writer.close()
    with pytest.raises(DatasetError, match="holds no whole episode"):
        open_rlds(tmp_path / "new")


def _write_foreign(directory: Path, episodes: list[dict[str, np.ndarray]]) -> None:
    """An RLDS dataset written as TFDS's D4RL builders lay theirs out (float32
    observations and actions, step `infos`, no seed-agents metadata), in a version
    directory like `~/tensorflow_datasets/<name>/<config>/<version>`."""
    config = tfds.rlds.rlds_base.DatasetConfig(
        name="d4rl_toy",
        observation_info=tfds.features.Tensor(shape=(3,), dtype=np.float32),
        action_info=tfds.features.Tensor(shape=(2,), dtype=np.float32),
        reward_info=tfds.features.Scalar(dtype=np.float32),
        discount_info=tfds.features.Scalar(dtype=np.float32),
        step_metadata_info={"infos": tfds.features.FeaturesDict(
            {"qpos": tfds.features.Tensor(shape=(2,), dtype=np.float64)})})
    identity = tfds.core.DatasetIdentity(name="d4rl_toy", version=tfds.core.Version("1.2.0"),
                                         data_dir=os.fspath(directory), module_name="")
    info = tfds.rlds.rlds_base.build_info(config, identity)
    directory.mkdir(parents=True)
    writer = tfds.core.SequentialWriter(info, 10)
    writer.initialize_splits(["train"])
    writer.add_examples({"train": [{"steps": steps} for steps in episodes]})
    writer.close_all()


def _rlds_steps(observations, actions, rewards, discounts, terminal: bool):
    length = len(observations)
    return {"observation": np.asarray(observations, np.float32),
            "action": np.asarray(actions, np.float32),
            "reward": np.asarray(rewards, np.float32),
            "discount": np.asarray(discounts, np.float32),
            "is_first": np.arange(length) == 0,
            "is_last": np.arange(length) == length - 1,
            "is_terminal": (np.arange(length) == length - 1) & terminal,
            "infos": {"qpos": np.zeros((length, 2))}}


def test_a_foreign_rlds_dataset_reads_as_episodes_of_our_alignment(tmp_path):
    obs = [[float(t)] * 3 for t in range(4)]
    act = [[t / 10, -t / 10] for t in range(4)]
    _write_foreign(tmp_path / "d4rl_toy" / "v2-medium" / "1.2.0", [
        # A termination, the D4RL way: its final observation on a last step whose action
        # and reward are zero; the discount of the transition into it is 0.
        _rlds_steps(obs, act[:3] + [[0, 0]], [1.0, 2.0, 3.0, 0.0], [1, 1, 0, 0], True),
        # A time limit whose last step still carries the final transition's reward
        # (its next observation is not in the dataset).
        _rlds_steps(obs[:3], act[:3], [4.0, 5.0, 6.0], [1, 1, 1], False),
        # One step: no transition at all.
        _rlds_steps(obs[:1], act[:1], [0.0], [0.0], True),
    ])
    assert rlds_path("rlds:" + os.fspath(tmp_path / "d4rl_toy" / "v2-medium")) == \
        os.fspath(tmp_path / "d4rl_toy" / "v2-medium")
    dataset = open_rlds(tmp_path / "d4rl_toy" / "v2-medium")  # its newest version
    assert dataset.path == os.fspath(tmp_path / "d4rl_toy" / "v2-medium" / "1.2.0")
    assert dataset.spec.environment.startswith("d4rl_toy/") and dataset.spec.extras == {}
    check_rlds_matches(dataset, continuous_spec(), {}, "gym:Toy-v0")

    with pytest.warns(UserWarning) as caught:
        terminated, truncated = list(iterate_rlds_episodes(dataset))
    messages = " ".join(str(w.message) for w in caught)
    assert "1 one-step episodes" in messages and "last steps of 1 episodes carry a reward" \
        in messages
    np.testing.assert_array_equal(terminated["observation"], np.asarray(obs, np.float32))
    np.testing.assert_array_equal(terminated["action"], np.asarray(act[:3] + [[0, 0]],
                                                                   np.float32))
    np.testing.assert_array_equal(terminated["reward"], [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(terminated["discount"], [1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(terminated["step_type"], [0, 1, 1, 2])
    np.testing.assert_array_equal(truncated["reward"], [0.0, 4.0, 5.0])
    np.testing.assert_array_equal(truncated["discount"], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(truncated["step_type"], [0, 1, 2])
    assert terminated["reward"].dtype == np.float32 and truncated["step_type"].dtype == np.uint8


def test_a_dataset_of_another_spec_is_refused_naming_both_specs(rlds_dataset):
    dataset = open_rlds(rlds_dataset)
    features = os.path.join(os.fspath(rlds_dataset), "features.json")
    with pytest.raises(DatasetError) as refused:
        check_rlds_matches(dataset, continuous_spec(observation=17), {}, "gym:Big-v0")
    assert str(refused.value) == (
        f"{features}: the dataset's observations are (3,) float32 (recorded on {ENV}); "
        "the environment of gym:Big-v0 has (17,) float32.")
    with pytest.raises(DatasetError, match=r"the dataset's actions are \(2,\) float32 .*"
                                           r"has \(\) int32, 4 values"):
        check_rlds_matches(dataset, discrete_spec(), {})
    with pytest.raises(DatasetError, match="learns from the behaviour policy's extra "
                                           "'values'"):
        check_rlds_matches(dataset, continuous_spec(),
                           {"values": specs.Array((3,), np.float32)}, agent="VTrace")


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_missing_truncated_and_corrupt_rlds_directories_are_errors_naming_them(
        rlds_dataset, tmp_path):
    with pytest.raises(DatasetError, match=f"{tmp_path / 'nothing'} does not exist"):
        open_rlds(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="is not an RLDS \\(TFDS\\) dataset: no "
                                           "dataset_info.json"):
        open_rlds(tmp_path / "empty")
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "spec.json").write_text("{}")
    with pytest.raises(DatasetError, match="dataset of our own format: pass it without "
                                           "'rlds:'"):
        open_rlds(tmp_path / "ours")
    with pytest.raises(DatasetError, match="needs a path"):
        rlds_path("rlds:")
    assert rlds_path("runs/dataset") is None

    garbled = _copy(rlds_dataset, tmp_path / "garbled")
    (garbled / "dataset_info.json").write_text("{not json")
    with pytest.raises(DatasetError, match=f"Cannot read the RLDS dataset {garbled}"):
        open_rlds(garbled)

    missing = _copy(rlds_dataset, tmp_path / "missing")
    (missing / SHARD).unlink()
    with pytest.raises(DatasetError, match=f"{missing / SHARD} is missing: .* lists it "
                                           "with 3 episodes"):
        open_rlds(missing)

    cut = _copy(rlds_dataset, tmp_path / "cut")
    (cut / SHARD).write_bytes((cut / SHARD).read_bytes()[:-20])
    with pytest.raises(DatasetError, match=f"{cut / SHARD} is truncated: it holds 2 whole "
                                           "episodes and [0-9]+ bytes of a cut one"):
        open_rlds(cut)

    corrupt = _copy(rlds_dataset, tmp_path / "corrupt")
    data = bytearray((corrupt / SHARD).read_bytes())
    first_record = int.from_bytes(data[:8], "little")
    assert first_record > 100
    data[12 + first_record // 2] ^= 0xFF  # a byte inside the first episode's record
    (corrupt / SHARD).write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=f"{corrupt}, split 'train', episode 0 is "
                                           "corrupted"):
        list(iterate_rlds_episodes(corrupt))

    other_split = json.loads((rlds_dataset / "dataset_info.json").read_text())["splits"]
    assert [s["name"] for s in other_split] == ["train"]
    with pytest.raises(DatasetError, match="has no split 'test' \\(its splits: train\\)"):
        open_rlds(rlds_dataset, split="test")
