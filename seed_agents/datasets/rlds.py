"""Episodes as RLDS datasets (TFDS directories): written by `RLDSWriter`, read back as
the episodes of our own format, so `seed-agents record --format rlds` makes a dataset
that TFDS, RLDS and other toolkits read, and the offline agents learn from any local RLDS
dataset of the environment's spec (`--dataset rlds:PATH`), a downloaded D4RL one included
(`~/tensorflow_datasets/d4rl_mujoco_halfcheetah/v2-medium/1.2.0`).

The writing and the reading are TensorFlow Datasets' own (`tensorflow-datasets`, the
`rlds` extra): `tfds.core.SequentialWriter` with the RLDS features of
`tfds.rlds.rlds_base.build_info`, the writer the `rlds` package's `EpisodeWriter` and
EnvLogger's TFDS backend use; `tfds.builder_from_directory` to read. A dataset is::

    DIR/
      dataset_info.json                       splits, shard lengths, description
      features.json                           the features below
      metadata.json                           {"seed_agents": our spec.json's content}
      seed_agents_episodes-train.tfrecord-00000   one TFDS example per episode
      ...

An episode is {"steps": steps}; each step holds

    observation   [*observation shape]  observation dtype
    action        [*action shape]       int32 | float32
    reward        float32
    discount      float32
    is_first, is_last, is_terminal   bool
    extras        {name: ...}           the behaviour policy's extras (when it has any)

Time alignment. Our episodes are dm_env time steps (`seed_agents.datasets.format`): row
t holds o_t and the reward r_t and discount d_t that *arrived with* o_t (r_0 = 0,
d_0 = 1), and the action a_t chosen at o_t. An RLDS step t holds o_t, a_t and the reward
and discount *that followed* a_t, on arriving at o_{t+1} (the RLDS spec: "reward:
return after applying the action"; TFDS's EnvLogger conversion and D4RL build them
so). So for an episode of T rows (FIRST ... LAST)::

    RLDS step t < T-1:  observation o_t, action a_t, reward r_{t+1}, discount d_{t+1}
    RLDS step T-1:      observation o_{T-1}, is_last; is_terminal = (d_{T-1} == 0);
                        action a_{T-1} (ours: never executed), reward 0, discount 0
                        (RLDS: a last step's action, reward and discount are invalid)

and reading inverts it: r_0 = 0, d_0 = 1, r_t = reward_{t-1}, d_t = discount_{t-1}
(t >= 1), and d_{T-1} = 0 when the last step is terminal (RLDS's `is_terminal` decides,
whatever discount the step before holds: some datasets keep discount 1 throughout). The
write-read round trip is exact. The reading side ignores the last step's reward: a
dataset whose last step still carries one (an RLDS writer that stored the final
transition without its next observation: D4RL before TFDS version 1.2.0) loses that
transition, with a warning. One-step episodes hold no transition and are skipped.

Durability: TFDS lists a shard in `dataset_info.json` only when it is closed (every
`episodes_per_file` episodes, and at `close`), so a killed recording keeps the episodes
of its closed shards only, unlike our own format, which keeps every whole episode.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents.datasets.format import (
    ACTION,
    DISCOUNT,
    EXTRAS_PREFIX,
    FIRST,
    FORMAT_NAME,
    LAST,
    MID,
    OBSERVATION,
    REWARD,
    STEP_TYPE,
    DatasetError,
    DatasetSpec,
    check_matches,
    spec_path,
)
from seed_agents.datasets.reader import scan_records

RLDS_PREFIX = "rlds:"
"""`--dataset rlds:PATH` names an RLDS dataset directory (see `rlds_path`)."""

DATASET_NAME = "seed_agents_episodes"
DATASET_VERSION = "1.0.0"
SPLIT = "train"
METADATA_KEY = "seed_agents"
INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
EXTRAS = "extras"
INSTALL_HINT = ("RLDS datasets need TensorFlow Datasets: pip install 'seed-agents[rlds]' "
                "(tensorflow-datasets).")

_STEPS_PER_READ = 4096  # an episode's steps are read in chunks of this many


def _tfds() -> Any:
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise DatasetError(f"{INSTALL_HINT} ({error})") from error
    return tfds


def rlds_path(dataset: str | os.PathLike[str]) -> str | None:
    """The directory of `--dataset rlds:PATH` (the user's `~` expanded); None for any
    other dataset argument (a directory of our own format)."""
    text = os.fspath(dataset)
    if not text.startswith(RLDS_PREFIX):
        return None
    path = text[len(RLDS_PREFIX):]
    if not path:
        raise DatasetError("--dataset rlds:PATH needs a path after 'rlds:'.")
    return os.path.expanduser(path)


# ---------------------------------------------------------------------------- writing


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a/b": x} into {"a": {"b": x}}."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        node = nested
        *parents, leaf = name.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _flat(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": x}} into {"a/b": x}."""
    flat = {}
    for name, value in nested.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _features(spec: DatasetSpec) -> Any:
    """The RLDS DatasetConfig of `spec`'s episodes."""
    tfds = _tfds()
    fields = spec.fields()

    def tensor(name: str) -> Any:
        shape, dtype = fields[name]
        return tfds.features.Tensor(shape=shape, dtype=dtype.type)

    extras = {name: tensor(EXTRAS_PREFIX + name) for name in spec.extras}
    what = f"Episodes of {spec.environment or 'an environment'} recorded by seed-agents."
    return tfds.rlds.rlds_base.DatasetConfig(
        name=DATASET_NAME,
        overall_description=what,
        description=what,
        observation_info=tensor(OBSERVATION),
        action_info=tensor(ACTION),
        reward_info=tfds.features.Scalar(dtype=np.float32),
        discount_info=tfds.features.Scalar(dtype=np.float32),
        step_metadata_info=({EXTRAS: tfds.features.FeaturesDict(_nested(extras))}
                            if extras else None),
    )


def to_rlds_steps(episode: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """One episode of our format ({field: [T, ...]}, FIRST ... LAST) as RLDS steps
    ({field: [T, ...]}), aligned as the module docstring says."""
    step_type = np.asarray(episode[STEP_TYPE])
    length = len(step_type)
    reward = np.zeros(length, np.float32)
    discount = np.zeros(length, np.float32)
    reward[:-1] = episode[REWARD][1:]
    discount[:-1] = episode[DISCOUNT][1:]
    last = np.arange(length) == length - 1
    steps = {
        "observation": np.asarray(episode[OBSERVATION]),
        "action": np.asarray(episode[ACTION]),
        "reward": reward,
        "discount": discount,
        "is_first": np.arange(length) == 0,
        "is_last": last,
        "is_terminal": last & (float(episode[DISCOUNT][-1]) == 0.0),
    }
    extras = {name[len(EXTRAS_PREFIX):]: np.asarray(value) for name, value in episode.items()
              if name.startswith(EXTRAS_PREFIX)}
    if extras:
        steps[EXTRAS] = _nested(extras)
    return steps


class RLDSWriter:
    """Writes whole episodes as a new RLDS dataset; `close` finishes it.

    The interface of `DatasetWriter` (`path`, `spec`, `episodes`, `write`, `close`), so
    `EpisodeRecorder` feeds either: `seed-agents record --format rlds` and
    `train --record` change only which writer they make. Episodes are handed to TFDS's
    writer in groups, at most every `flush_every_s` (each hand-over rewrites the
    dataset's JSON files) or when `flush_bytes` wait; a shard closes every
    `episodes_per_file` episodes. Not thread-safe (`EpisodeRecorder` serializes its
    callers).

    Raises (constructing):
      ValueError: `path` exists and is not an empty directory (nothing is written).
      DatasetError: TensorFlow Datasets is not installed.
    """

    def __init__(self, path: str | os.PathLike[str], spec: DatasetSpec,
                 episodes_per_file: int = 1000, flush_every_s: float = 5.0,
                 flush_bytes: int = 64 << 20):
        path = os.fspath(path)
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise ValueError(f"{path} exists and is not an empty directory: record into a "
                             "new one (nothing was written).")
        if episodes_per_file < 1:
            raise ValueError(f"episodes_per_file must be >= 1, got {episodes_per_file}.")
        tfds = _tfds()
        self.path = path
        self.spec = dataclasses.replace(spec, episodes=0, steps=0, files={}, complete=False,
                                        behaviour=dict(spec.behaviour))
        self._fields = self.spec.fields()
        config = _features(self.spec)
        identity = tfds.core.DatasetIdentity(
            name=DATASET_NAME, version=tfds.core.Version(DATASET_VERSION), data_dir=path,
            module_name="")
        self._info = tfds.rlds.rlds_base.build_info(
            config, identity, {METADATA_KEY: self.spec.to_json()})
        os.makedirs(path, exist_ok=True)
        self._writer = tfds.core.SequentialWriter(self._info, episodes_per_file,
                                                  file_format="tfrecord")
        self._writer.initialize_splits([SPLIT])
        self._pending: list[dict[str, Any]] = []
        self._pending_bytes = 0
        self._flush_every_s = flush_every_s
        self._flush_bytes = flush_bytes
        self._next_flush = time.monotonic() + flush_every_s
        self._closed = False

    @property
    def episodes(self) -> int:
        return self.spec.episodes

    def write(self, episode: Mapping[str, np.ndarray]) -> None:
        """Adds one episode: {field name: [T, ...] array} with every field of the spec
        (`DatasetSpec.fields`), T >= 2, step types FIRST, MID..., LAST."""
        if self._closed:
            raise ValueError(f"The dataset writer of {self.path} is closed.")
        step_type = np.asarray(episode[STEP_TYPE])
        length = len(step_type)
        for name, (shape, dtype) in self._fields.items():
            column = np.asarray(episode[name])
            if column.shape != (length, *shape) or column.dtype != dtype:
                raise ValueError(f"Episode field {name} is {column.dtype}{list(column.shape)}; "
                                 f"the dataset's is {dtype}{[length, *shape]}.")
        if length < 2 or step_type[0] != FIRST or step_type[-1] != LAST or \
                np.any(step_type[1:-1] != MID):
            raise ValueError(f"Not a whole episode: {length} step types starting "
                             f"{step_type[:3]} and ending {step_type[-1:]}.")
        steps = to_rlds_steps({name: episode[name] for name in self._fields})
        self._pending.append({"steps": steps})
        self._pending_bytes += sum(np.asarray(episode[name]).nbytes for name in self._fields)
        self.spec.episodes += 1
        self.spec.steps += length
        if self._pending_bytes >= self._flush_bytes or time.monotonic() >= self._next_flush:
            self.flush()

    def flush(self) -> None:
        """Hands the episodes written so far to TFDS's writer (they are on disk, and
        readable once their shard closes)."""
        if self._pending:
            self._info.metadata[METADATA_KEY] = self.spec.to_json()
            self._writer.add_examples({SPLIT: self._pending})
        self._pending = []
        self._pending_bytes = 0
        self._next_flush = time.monotonic() + self._flush_every_s

    def close(self) -> None:
        """Writes what waits, closes the last shard and marks the dataset complete in its
        metadata. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.spec.complete = True
        self.flush()
        self._info.metadata[METADATA_KEY] = self.spec.to_json()
        self._writer.close_all()


def write_rlds(path: str | os.PathLike[str], spec: DatasetSpec,
               episodes: Iterable[Mapping[str, np.ndarray]], **writer_args: Any) -> int:
    """Writes `episodes` (as `iterate_episodes` yields them) as a new RLDS dataset of
    `spec`'s environment; returns how many. E.g. a dataset of our own format, converted:
    `write_rlds(out, open_dataset(src).spec, iterate_episodes(src))`."""
    writer = RLDSWriter(path, spec, **writer_args)
    try:
        for episode in episodes:
            writer.write(episode)
    finally:
        writer.close()
    return writer.episodes


# ---------------------------------------------------------------------------- reading


def tree_concat(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The chunks' arrays joined along their first axis, field by field."""
    if len(chunks) == 1:
        return chunks[0]
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}


@dataclasses.dataclass(frozen=True)
class RLDSDataset:
    """An opened RLDS dataset: its directory (the one holding `dataset_info.json`), the
    split read, our spec of its episodes (environment: the one recorded in seed-agents'
    metadata, else the TFDS dataset's full name) and its episode count."""

    path: str
    split: str
    spec: DatasetSpec
    episodes: int
    builder: Any = dataclasses.field(repr=False, compare=False)

    @property
    def info_file(self) -> str:
        return os.path.join(self.path, INFO_FILE)

    @property
    def features_file(self) -> str:
        return os.path.join(self.path, FEATURES_FILE)


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (-1,)


def find_dataset_dir(path: str | os.PathLike[str]) -> str:
    """The directory of `path` that holds a TFDS `dataset_info.json`: `path` itself, or
    the newest version directory under it (`.../v2-medium` -> `.../v2-medium/1.2.0`).

    Raises:
      DatasetError: `path` does not exist, or holds no such directory, or several that
        are not versions of one dataset (the message lists them).
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.exists(path) else "is not a directory"
        raise DatasetError(f"{path} {what}: pass an RLDS (TFDS) dataset directory, the one "
                           f"holding {INFO_FILE}.")
    if os.path.isfile(os.path.join(path, INFO_FILE)):
        return path
    found = []
    for depth_one in sorted(os.listdir(path)):
        one = os.path.join(path, depth_one)
        if not os.path.isdir(one):
            continue
        if os.path.isfile(os.path.join(one, INFO_FILE)):
            found.append(one)
            continue
        found += [os.path.join(one, two) for two in sorted(os.listdir(one))
                  if os.path.isfile(os.path.join(one, two, INFO_FILE))]
    if not found:
        hint = (f" (it is a dataset of our own format: pass it without '{RLDS_PREFIX}')"
                if os.path.isfile(spec_path(path)) else "")
        raise DatasetError(f"{path} is not an RLDS (TFDS) dataset: no {INFO_FILE} in it or "
                           f"in its version directories{hint}.")
    parents = {os.path.dirname(directory) for directory in found}
    if len(parents) > 1:
        listed = ", ".join(os.path.relpath(d, path) for d in found)
        raise DatasetError(f"{path} holds several RLDS datasets ({listed}): pass one of them.")
    return max(found, key=lambda directory: _version_key(os.path.basename(directory)))


def _describe_feature(feature: Any) -> str:
    try:
        return f"{tuple(feature.shape)} {np.dtype(feature.np_dtype).name}"
    except (AttributeError, TypeError):
        return type(feature).__name__


def _array_of(feature: Any, name: str, where: str) -> dict[str, Any]:
    """{"shape", "dtype"} (and "num_values" of a class label) of a step feature that is
    one array of fixed shape; DatasetError otherwise."""
    shape = getattr(feature, "shape", None)
    dtype = getattr(feature, "np_dtype", None)
    if not isinstance(shape, tuple) or dtype is None or any(d is None for d in shape):
        raise DatasetError(f"{where}: the steps' {name} is {feature!r}; seed-agents reads "
                           f"one array of fixed shape per step.")
    described: dict[str, Any] = {"shape": [int(d) for d in shape],
                                 "dtype": np.dtype(dtype).name}
    num_classes = getattr(feature, "num_classes", None)
    if num_classes is not None:
        described["num_values"] = int(num_classes)
    return described


def _step_features(builder: Any, where: str) -> Any:
    tfds = _tfds()
    features = builder.info.features
    steps = features["steps"] if "steps" in features else None
    if not isinstance(steps, tfds.features.Dataset):
        raise DatasetError(f"{where}: its episodes have no 'steps' dataset (features: "
                           f"{sorted(features.keys())}): not an RLDS dataset.")
    return steps.feature


def _spec_of(builder: Any, where: str) -> DatasetSpec:
    """Our spec of the RLDS dataset's episodes: shapes and dtypes from its features;
    environment, action bounds or values and behaviour from seed-agents' metadata when
    it has any and it agrees."""
    step = _step_features(builder, where)
    missing = [name for name in ("observation", "action", "reward") if name not in step]
    if missing:
        raise DatasetError(f"{where}: its steps have no {', '.join(missing)} (they have "
                           f"{', '.join(sorted(step.keys()))}).")
    for name in ("reward", "discount"):
        if name in step and tuple(getattr(step[name], "shape", (None,))) != ():
            raise DatasetError(f"{where}: the steps' {name} is "
                               f"{_describe_feature(step[name])}; seed-agents reads a scalar.")
    observation = _array_of(step["observation"], "observation", where)
    action = _array_of(step["action"], "action", where)
    extras = {}
    if EXTRAS in step:
        extras = {name: _array_of(feature, f"extras/{name}", where)
                  for name, feature in _flat(dict(step[EXTRAS].items())).items()}
    environment = builder.info.full_name
    behaviour: dict[str, Any] = {"source": "rlds", "dataset": builder.info.full_name}
    steps, complete = 0, True  # a foreign dataset's step count is unknown
    ours = _our_metadata(builder)
    if ours is not None:
        environment = ours.environment or environment
        behaviour = dict(ours.behaviour)
        steps, complete = ours.steps, ours.complete
        if (ours.action["shape"], ours.action["dtype"]) == (action["shape"], action["dtype"]):
            action = dict(ours.action)
    return DatasetSpec(environment=environment, observation=observation, action=action,
                       extras=extras, episodes=builder.info.splits.total_num_examples,
                       steps=steps, complete=complete, behaviour=behaviour)


def _our_metadata(builder: Any) -> DatasetSpec | None:
    """The spec seed-agents' writer left in `metadata.json`, if any."""
    try:
        data = (builder.info.metadata or {}).get(METADATA_KEY)
    except (OSError, ValueError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        return None
    try:
        return DatasetSpec.from_json(data, "metadata.json")
    except DatasetError:
        return None


def _check_shards(builder: Any, split: str, where: str) -> None:
    """Every shard the split lists is there and, as TFRecord, holds its whole records."""
    split_info = builder.info.splits[split]
    lengths = list(split_info.shard_lengths)
    files = [os.fspath(f) for f in split_info.filepaths]
    tfrecord = getattr(builder.info.file_format, "value", "tfrecord") in (None, "tfrecord")
    for file, listed in zip(files, lengths, strict=False):
        if not os.path.isfile(file):
            raise DatasetError(f"{file} is missing: {where} lists it with {listed} episodes.")
        if tfrecord:
            scanned = scan_records(file)
            if scanned.torn_bytes or scanned.records != listed:
                torn = (f" and {scanned.torn_bytes} bytes of a cut one"
                        if scanned.torn_bytes else "")
                raise DatasetError(f"{file} is truncated: it holds {scanned.records} whole "
                                   f"episodes{torn}, and {where} lists {listed}.")


def open_rlds(path: str | os.PathLike[str], split: str | None = None) -> RLDSDataset:
    """Opens the RLDS dataset at `path` (see `find_dataset_dir`) and checks its shards.

    `split`: None reads "train", or the only split there is.

    Raises:
      DatasetError: no dataset there, unreadable or non-RLDS metadata, a split that is
        not there, a shard that is missing or cut short, or no episode (the message
        names the directory or the file).
    """
    tfds = _tfds()
    directory = find_dataset_dir(path)
    where = os.path.join(directory, INFO_FILE)
    try:
        builder = tfds.builder_from_directory(directory)
        splits = dict(builder.info.splits)
    except Exception as error:  # noqa: BLE001 - TFDS raises many kinds here
        raise DatasetError(f"Cannot read the RLDS dataset {directory}: {error}") from error
    if split is None:
        split = SPLIT if SPLIT in splits or len(splits) != 1 else next(iter(splits))
    if split not in splits:
        raise DatasetError(f"{where} has no split {split!r} (its splits: "
                           f"{', '.join(sorted(splits)) or 'none'}).")
    spec = _spec_of(builder, where)
    _check_shards(builder, split, where)
    episodes = int(splits[split].num_examples)
    if episodes == 0:
        raise DatasetError(f"{directory} holds no whole episode in split {split!r} ({where}: "
                           "a recording's episodes appear when their shard closes).")
    return RLDSDataset(directory, split, spec, episodes, builder)


def check_rlds_matches(dataset: RLDSDataset, env_spec: Any, extras_spec: Mapping[str, Any],
                       environment: str | None = None, agent: str = "the agent") -> None:
    """`check_matches` for an RLDS dataset: DatasetError naming its `features.json`, the
    dataset's spec and the environment's, when its episodes cannot feed the agent."""
    try:
        check_matches(dataset.spec, dataset.path, env_spec, extras_spec, environment, agent)
    except DatasetError as error:
        message = str(error).replace(spec_path(dataset.path), dataset.features_file, 1)
        raise DatasetError(message) from error


def _from_rlds_steps(steps: Mapping[str, np.ndarray], extras: Iterable[str],
                     where: str) -> dict[str, np.ndarray] | None:
    """One RLDS episode's steps ({field: [T, ...]}) as our episode (module docstring);
    None for a one-step episode."""
    length = len(steps["observation"])
    if length < 2:
        return None
    position = np.arange(length)
    is_first = steps.get("is_first", position == 0)
    is_last = steps.get("is_last", position == length - 1)
    if not is_first[0] or np.any(is_first[1:]) or not is_last[-1] or np.any(is_last[:-1]):
        raise DatasetError(f"{where}: not a whole episode (is_first must be set on its first "
                           f"step only and is_last on its last only; {length} steps, is_first "
                           f"at {np.flatnonzero(is_first)[:4]}, is_last at "
                           f"{np.flatnonzero(is_last)[:4]}).")
    reward = np.zeros(length, np.float32)
    reward[1:] = steps["reward"][:-1]
    discount = np.ones(length, np.float32)
    if "discount" in steps:
        discount[1:] = steps["discount"][:-1]
    terminal = steps.get("is_terminal")
    if terminal is not None:
        if np.any(terminal[:-1]):
            raise DatasetError(f"{where}: is_terminal is set before the last step (at "
                               f"{np.flatnonzero(terminal)[:4]}).")
        if terminal[-1]:
            discount[-1] = 0.0
    for name, column in (("reward", reward), ("discount", discount)):
        if not np.all(np.isfinite(column)):
            raise DatasetError(f"{where}: {name} has non-finite values.")
    step_type = np.full(length, MID, np.uint8)
    step_type[0], step_type[-1] = FIRST, LAST
    episode = {OBSERVATION: steps["observation"], ACTION: steps["action"], REWARD: reward,
               DISCOUNT: discount, STEP_TYPE: step_type}
    for name in extras:
        episode[EXTRAS_PREFIX + name] = steps[EXTRAS_PREFIX + name]
    return episode


def iterate_rlds_episodes(dataset: RLDSDataset | str | os.PathLike[str],
                          split: str | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Yields the episodes of an RLDS dataset (an `open_rlds` result, or a path to open)
    as `iterate_episodes` yields ours: dicts of numpy [T, ...] arrays, flat field names
    (`DatasetSpec.fields`), in the dataset's order, aligned as the module docstring says.

    Raises:
      DatasetError: naming the split and the episode, for a corrupted record or a step
        sequence that is not a whole episode (and as `open_rlds` does).
    """
    if not isinstance(dataset, RLDSDataset):
        dataset = open_rlds(dataset, split)
    extras = list(dataset.spec.extras)
    step = _step_features(dataset.builder, dataset.info_file)
    wanted = [name for name in ("observation", "action", "reward", "discount", "is_first",
                                "is_last", "is_terminal") if name in step]

    def select(values: Mapping[str, Any]) -> dict[str, Any]:
        chosen = {name: values[name] for name in wanted}
        if extras:
            flat = _flat(values[EXTRAS])
            chosen.update({EXTRAS_PREFIX + name: flat[name] for name in extras})
        return chosen

    episodes = iter(dataset.builder.as_dataset(split=dataset.split, shuffle_files=False))
    index = skipped = with_reward = 0
    while True:
        where = f"{dataset.path}, split {dataset.split!r}, episode {index}"
        try:
            # An episode's steps in chunks of `_STEPS_PER_READ`, joined here: one batch of
            # a whole episode would be preallocated at the batch's size (map_and_batch).
            chunks = list(next(episodes)["steps"].map(select).batch(_STEPS_PER_READ)
                          .as_numpy_iterator())
        except StopIteration:
            break
        except tf.errors.DataLossError as error:
            raise DatasetError(f"{where} is corrupted: {error.message}") from error
        except tf.errors.OpError as error:
            raise DatasetError(f"{where} cannot be read: {error.message}") from error
        if not chunks:  # an episode of no steps: nothing to learn from
            index += 1
            skipped += 1
            continue
        steps = tree_concat(chunks)
        episode = _from_rlds_steps(steps, extras, where)
        index += 1
        if episode is None:
            skipped += 1
            continue
        if steps["reward"][-1] != 0:
            with_reward += 1
        yield episode
    if skipped:
        warnings.warn(f"{dataset.path}: {skipped} one-step episodes (no transition) were "
                      "skipped.", stacklevel=2)
    if with_reward:
        warnings.warn(f"{dataset.path}: the last steps of {with_reward} episodes carry a "
                      "reward, which RLDS marks invalid (a last step holds the final "
                      "observation); their final transitions, whose next observations the "
                      "dataset lacks, are left out.", stacklevel=2)
