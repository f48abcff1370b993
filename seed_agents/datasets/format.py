"""The on-disk format of recorded episodes: a directory that `tf.data` reads.

Why our own format beside RLDS (`seed_agents.datasets.rlds`, `--format rlds`): RLDS
needs `tensorflow-datasets` (an extra, with pyarrow and array_record, and
tensorflow-metadata pinned below 1.18 beside TF 2.14's protobuf 4), and its writer lists
a shard only when the shard closes: a killed recording keeps its closed shards only.
Here every episode is durable once written, and a dataset is two kinds of
file any TensorFlow reads::

    DATASET/
      spec.json                  what the episodes are (below)
      episodes-00000.tfrecord    TFRecord files, one record per whole episode
      episodes-00001.tfrecord    (a new file every `max_file_bytes`, 1 GiB by default)

`spec.json`::

    {"format": "seed-agents-episodes", "version": 1,
     "environment": "gym:CartPole-v1",
     "observation": {"shape": [4], "dtype": "float32"},
     "action": {"shape": [], "dtype": "int32", "num_values": 2},
                 (continuous: {"shape": [d], "dtype": "float32", "minimum": -1.0,
                               "maximum": 1.0}: the toolkit's canonical actions)
     "extras": {"logits": {"shape": [2], "dtype": "float32"}},
     "episodes": 200, "steps": 51234,
     "files": {"episodes-00000.tfrecord": 200},
     "complete": true,
     "behaviour": {"source": "record", "logdir": "runs/cartpole", "epsilon": 0.3, ...}}

`complete` is false while recording and becomes true when the writer closes; `episodes`,
`steps` and `files` (whole episodes per file) are exact when complete and a lower bound
otherwise (they are refreshed every few seconds while recording).

Each record is a serialized `tf.train.Example` whose features each hold one
`bytes_list` value: a serialized `TensorProto` (what `tf.io.serialize_tensor` writes and
`tf.io.parse_tensor` reads) of the whole episode's column, time first, T = the number of
timesteps of the episode (its FIRST step to its LAST, both included):

    observation      [T, *observation shape]  observation dtype   o_t
    action           [T, *action shape]       int32 | float32     a_t, what the behaviour
                                                                  policy did at o_t (the
                                                                  LAST row's is never
                                                                  executed)
    reward           [T] float32   r_t, the reward that arrived with o_t (0 at FIRST)
    discount         [T] float32   d_t, the discount that arrived with o_t (1 at FIRST;
                                   0 at a terminal LAST, 1 at a time-limit LAST)
    step_type        [T] uint8     dm_env's: 0 FIRST, 1 MID, 2 LAST
    extras/<name>    [T, ...]      the behaviour policy's extras at o_t (e.g. V-trace's
                                   "logits"); nested names joined by "/"

This is the row layout of `seed_agents.replay.unrolls` without `prev_action` (which is
the previous row's action, 0 at FIRST), so episodes feed the inference server's adders
unchanged. Read them with `seed_agents.datasets.episode_dataset(path)`, or in plain
TensorFlow::

    spec = json.load(open(f"{path}/spec.json"))
    files = sorted(glob.glob(f"{path}/episodes-*.tfrecord"))
    def parse(record):
        example = tf.io.parse_single_example(
            record, {"observation": tf.io.FixedLenFeature([], tf.string), ...})
        return {"observation": tf.io.parse_tensor(example["observation"], tf.float32), ...}
    episodes = tf.data.TFRecordDataset(files).map(parse)

A TFRecord frame is (uint64 length, uint32 CRC of it, data, uint32 CRC of data), so a
record cut short by a kill is recognisable: `seed_agents.datasets.reader` reads only
whole records, and warns about a torn one at the end of a file of an incomplete dataset.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tree
from dm_env import specs

FORMAT_NAME = "seed-agents-episodes"
FORMAT_VERSION = 1
SPEC_FILE = "spec.json"
FILE_PATTERN = "episodes-{:05d}.tfrecord"

OBSERVATION = "observation"
ACTION = "action"
REWARD = "reward"
DISCOUNT = "discount"
STEP_TYPE = "step_type"
EXTRAS_PREFIX = "extras/"

FIRST, MID, LAST = 0, 1, 2


class DatasetError(ValueError):
    """A dataset that cannot be read as asked: the message names the file and the fault."""


def _array_json(spec: specs.Array, bounds: bool = False) -> dict[str, Any]:
    """Shape and dtype; a discrete spec's values; with `bounds`, a bounded one's (finite
    for actions: observation bounds may be infinite, which JSON cannot hold)."""
    described: dict[str, Any] = {"shape": [int(d) for d in spec.shape],
                                 "dtype": np.dtype(spec.dtype).name}
    if isinstance(spec, specs.DiscreteArray):
        described["num_values"] = int(spec.num_values)
    elif bounds and isinstance(spec, specs.BoundedArray):
        described["minimum"] = np.broadcast_to(spec.minimum, spec.shape).tolist()
        described["maximum"] = np.broadcast_to(spec.maximum, spec.shape).tolist()
    return described


def extras_fields(extras_spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat "name/sub" -> {"shape", "dtype"} of a (possibly nested) extras spec."""
    fields = {}
    for path, spec in tree.flatten_with_path(dict(extras_spec)):
        fields["/".join(str(p) for p in path)] = {"shape": [int(d) for d in spec.shape],
                                                 "dtype": np.dtype(spec.dtype).name}
    return fields


@dataclasses.dataclass
class DatasetSpec:
    """What `spec.json` holds (see the module docstring, field by field)."""

    environment: str | None
    observation: dict[str, Any]
    action: dict[str, Any]
    extras: dict[str, dict[str, Any]]
    episodes: int = 0
    steps: int = 0
    files: dict[str, int] = dataclasses.field(default_factory=dict)
    complete: bool = False
    behaviour: dict[str, Any] = dataclasses.field(default_factory=dict)
    version: int = FORMAT_VERSION

    @classmethod
    def of(cls, environment: str | None, env_spec: Any, extras_spec: Mapping[str, Any],
           behaviour: Mapping[str, Any] | None = None) -> DatasetSpec:
        """The spec of a new dataset of `env_spec`'s environment and these extras."""
        return cls(environment=environment, observation=_array_json(env_spec.observations),
                   action=_array_json(env_spec.actions, bounds=True),
                   extras=extras_fields(extras_spec),
                   behaviour=dict(behaviour or {}))

    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Feature name -> (shape of one step, dtype), for every field of a record."""
        def entry(described: Mapping[str, Any]) -> tuple[tuple[int, ...], np.dtype]:
            return tuple(described["shape"]), np.dtype(described["dtype"])

        fields = {OBSERVATION: entry(self.observation), ACTION: entry(self.action),
                  REWARD: ((), np.dtype(np.float32)), DISCOUNT: ((), np.dtype(np.float32)),
                  STEP_TYPE: ((), np.dtype(np.uint8))}
        fields.update({EXTRAS_PREFIX + name: entry(e) for name, e in self.extras.items()})
        return fields

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: Any, path: str) -> DatasetSpec:
        """Raises DatasetError naming `path` for another format, a newer version or a
        malformed spec."""
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise DatasetError(f"{path} is not a seed-agents dataset spec (its \"format\" "
                               f"is not {FORMAT_NAME!r}).")
        version = data.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise DatasetError(f"{path} has format version {version!r}; this seed-agents "
                               f"reads versions up to {FORMAT_VERSION}.")
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            spec = cls(**{k: v for k, v in data.items() if k in names})
            spec.fields()  # shapes and dtypes parse
        except (TypeError, KeyError, ValueError) as error:
            raise DatasetError(f"{path} is malformed: {error!r}.") from error
        return spec


def spec_path(path: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(path), SPEC_FILE)


def read_spec(path: str | os.PathLike[str]) -> DatasetSpec:
    """The spec of the dataset in directory `path`; DatasetError when there is none."""
    file = spec_path(path)
    if not os.path.isfile(file):
        what = "does not exist" if not os.path.exists(path) else f"has no {SPEC_FILE}"
        raise DatasetError(f"{os.fspath(path)} {what}: pass a dataset directory written by "
                           "`seed-agents record` or `seed-agents train --record`.")
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise DatasetError(f"Cannot read {file}: {error}.") from error
    return DatasetSpec.from_json(data, file)


FILLED_EXTRAS: dict[str, int] = {"policy_version": -1}
"""Extras a learner logs from but does not learn from, and the value rows of a dataset
recorded without them get: V-trace's `policy_version` (the network version that acted,
for its policy-lag figure) is -1, "an unknown policy", which the learner leaves out."""


def describe(described: Mapping[str, Any]) -> str:
    """`(4,) float32` / `() int32, 2 values`: how errors show a field."""
    text = f"{tuple(described['shape'])} {described['dtype']}"
    if "num_values" in described:
        text += f", {described['num_values']} values"
    return text


def check_matches(spec: DatasetSpec, path: str, env_spec: Any,
                  extras_spec: Mapping[str, Any], environment: str | None = None,
                  agent: str = "the agent") -> None:
    """Raises DatasetError, naming the dataset's spec file, when its episodes cannot
    feed an agent acting in `env_spec` whose learner reads `extras_spec` (the agent's
    policy's extras: a V-trace learner needs the behaviour's logits)."""
    file = spec_path(path)
    for name, ours in (("observation", _array_json(env_spec.observations)),
                       ("action", _array_json(env_spec.actions))):
        theirs = getattr(spec, name)
        if describe(ours) != describe(theirs):
            env = f" of {environment}" if environment else ""
            raise DatasetError(f"{file}: the dataset's {name}s are {describe(theirs)} (recorded "
                               f"on {spec.environment}); the environment{env} has "
                               f"{describe(ours)}.")
    for name, needed in extras_fields(extras_spec).items():
        have = spec.extras.get(name)
        if have is None and name in FILLED_EXTRAS:
            continue
        if have is None or describe(have) != describe(needed):
            recorded = ", ".join(f"{k} {describe(v)}" for k, v in spec.extras.items()) or "none"
            raise DatasetError(
                f"{file}: {agent} learns from the behaviour policy's extra {name!r} "
                f"({describe(needed)}); the dataset's extras are {recorded}. Record with "
                "that agent, or train an offline agent (bc, cql), which needs none.")
