"""Reading recorded episodes back: whole records only, every fault named by file.

`open_dataset(path)` reads `spec.json` and scans each TFRecord file's frames (lengths
only: cheap) to find its whole records. A torn record at the end of a file of an
incomplete dataset (a recording that was killed) is ignored with a warning; in a
complete dataset, a torn record or fewer records than the spec lists means the file was
cut (copied short, truncated): an error. Records are then read with `tf.data`, which
checks each record's CRC: a corrupted one is an error naming the file and the record.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents.datasets.format import (
    EXTRAS_PREFIX,
    FIRST,
    LAST,
    MID,
    STEP_TYPE,
    DatasetError,
    DatasetSpec,
    read_spec,
    spec_path,
)

_HEADER = 12  # uint64 length + uint32 masked CRC of the length
_FOOTER = 4  # uint32 masked CRC of the data


@dataclasses.dataclass(frozen=True)
class EpisodeFile:
    """One TFRecord file of a dataset and how many whole records it holds."""

    path: str
    records: int
    torn_bytes: int  # bytes after the last whole record (a record cut by a kill)


def scan_records(path: str) -> EpisodeFile:
    """Counts the whole TFRecord frames of `path` by their lengths (CRCs unchecked)."""
    size = os.path.getsize(path)
    records = offset = 0
    with open(path, "rb") as f:
        while offset + _HEADER <= size:
            (length,) = struct.unpack("<Q", f.read(8))
            end = offset + _HEADER + length + _FOOTER
            if end > size:
                break
            records += 1
            offset = end
            f.seek(offset)
    return EpisodeFile(path, records, size - offset)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """An opened dataset: its spec and its files' whole records."""

    path: str
    spec: DatasetSpec
    files: tuple[EpisodeFile, ...]

    @property
    def episodes(self) -> int:
        return sum(f.records for f in self.files)


def open_dataset(path: str | os.PathLike[str], allow_empty: bool = False) -> Dataset:
    """Reads `path`'s spec and finds the whole records of its files.

    Raises:
      DatasetError: no or a bad `spec.json`, a file it lists that is missing or cut short
        in a complete dataset, or (unless `allow_empty`) no episode at all.
    """
    path = os.fspath(path)
    spec = read_spec(path)
    files = []
    for name, listed in sorted(spec.files.items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise DatasetError(f"{file} is missing: {spec_path(path)} lists it with "
                               f"{listed} episodes.")
        scanned = scan_records(file)
        if spec.complete and (scanned.torn_bytes or scanned.records < listed):
            raise DatasetError(
                f"{file} is truncated: it holds {scanned.records} whole episodes"
                f"{f' and {scanned.torn_bytes} bytes of a cut one' if scanned.torn_bytes else ''}"
                f", and {spec_path(path)} lists {listed}.")
        if scanned.torn_bytes:
            warnings.warn(f"{file}: the recording did not finish (killed?); its last "
                          f"{scanned.torn_bytes} bytes are a torn episode, ignored. "
                          f"{scanned.records} whole episodes are read.", stacklevel=2)
        files.append(scanned)
    dataset = Dataset(path, spec, tuple(files))
    if not allow_empty and dataset.episodes == 0:
        raise DatasetError(f"{path} holds no whole episode ({spec_path(path)}: "
                           f"{'complete' if spec.complete else 'recording unfinished'}).")
    return dataset


def _parser(spec: DatasetSpec) -> Any:
    fields = spec.fields()
    features = {name: tf.io.FixedLenFeature([], tf.string) for name in fields}

    def parse(record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, features)
        return {name: tf.ensure_shape(tf.io.parse_tensor(example[name], tf.as_dtype(dtype)),
                                      [None, *shape])
                for name, (shape, dtype) in fields.items()}

    return parse


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """"extras/a/b" keys into {"extras": {"a": {"b": ...}}}."""
    nested: dict[str, Any] = {"extras": {}}
    for name, value in flat.items():
        if not name.startswith(EXTRAS_PREFIX):
            nested[name] = value
            continue
        node = nested["extras"]
        *parents, leaf = name[len(EXTRAS_PREFIX):].split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def episode_dataset(path: str | os.PathLike[str]) -> tf.data.Dataset:
    """A `tf.data.Dataset` of the whole episodes of `path`, each a dict of [T, ...]
    tensors (observation, action, reward, discount, step_type, extras: {...}), in file
    order. A torn last record is left out (with a warning); a corrupted record raises
    `tf.errors.DataLossError` when reached (`iterate_episodes` names it)."""
    dataset = open_dataset(path, allow_empty=True)
    parse = _parser(dataset.spec)
    parts = [tf.data.TFRecordDataset(f.path).take(f.records) for f in dataset.files
             if f.records]
    if not parts:
        raise DatasetError(f"{dataset.path} holds no whole episode.")
    episodes = parts[0]
    for part in parts[1:]:
        episodes = episodes.concatenate(part)
    return episodes.map(lambda record: _nest(parse(record)))


def _check_episode(episode: dict[str, np.ndarray], where: str) -> None:
    step_type = episode[STEP_TYPE]
    length = len(step_type)
    for name, column in episode.items():
        if len(column) != length:
            raise DatasetError(f"{where}: field {name} has {len(column)} steps, "
                               f"step_type has {length}.")
    if length < 2 or step_type[0] != FIRST or step_type[-1] != LAST or \
            (length > 2 and np.any(step_type[1:-1] != MID)):
        raise DatasetError(f"{where}: not a whole episode (step types must be FIRST, "
                           f"MID..., LAST; got {length} steps starting {step_type[:3]} and "
                           f"ending {step_type[-1:]}).")
    for name in ("reward", "discount"):
        if not np.all(np.isfinite(episode[name])):
            raise DatasetError(f"{where}: {name} has non-finite values.")


def iterate_episodes(path: str | os.PathLike[str],
                     dataset: Dataset | None = None) -> Iterator[dict[str, Any]]:
    """Yields the whole episodes of `path` as dicts of numpy [T, ...] arrays (flat field
    names, as `DatasetSpec.fields`), file by file, each checked (lengths, step types,
    finite rewards and discounts).

    Raises:
      DatasetError: naming the file and the record for a corrupted or malformed one
        (and as `open_dataset` does).
    """
    dataset = dataset or open_dataset(path)
    parse = _parser(dataset.spec)
    for file in dataset.files:
        records = tf.data.TFRecordDataset(file.path).take(file.records).map(parse)
        iterator = iter(records)
        index = 0
        while True:
            where = f"{file.path}, episode {index}"
            try:
                episode = next(iterator)
            except StopIteration:
                break
            except tf.errors.DataLossError as error:
                raise DatasetError(f"{where} is corrupted: {error.message}") from error
            except tf.errors.InvalidArgumentError as error:
                raise DatasetError(f"{where} is not an episode of this dataset's spec: "
                                   f"{error.message}") from error
            episode = {name: value.numpy() for name, value in episode.items()}
            _check_episode(episode, where)
            yield episode
            index += 1
