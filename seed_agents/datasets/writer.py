"""Writing episodes as they end: a streaming dataset writer and the recorder that the
inference server feeds (see `seed_agents.datasets.format` for what lands on disk).

Memory stays bounded by one episode per environment: the recorder keeps each
environment's running episode and hands it to the writer when its LAST step arrives; the
writer serializes it, appends one TFRecord and flushes, so a SIGKILL at any moment loses
at most the episodes still running (and can tear only the record being written, which
readers detect and skip).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tree

from seed_agents.datasets.format import (
    ACTION,
    DISCOUNT,
    EXTRAS_PREFIX,
    FILE_PATTERN,
    FIRST,
    LAST,
    OBSERVATION,
    REWARD,
    STEP_TYPE,
    DatasetSpec,
    spec_path,
)
from seed_agents.replay import unrolls
from seed_agents.utils.checkpointing import write_json_atomically


def _feature(array: np.ndarray) -> tf.train.Feature:
    proto = tf.make_tensor_proto(np.ascontiguousarray(array))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[proto.SerializeToString()]))


class DatasetWriter:
    """Appends whole episodes to a new dataset directory; `close` marks it complete.

    `write` blocks for one serialization and one flushed append (no thread of its own:
    the caller's pace is the disk's). Not thread-safe; `EpisodeRecorder` serializes its
    callers. `spec.json` is rewritten at most every `update_every_s` while writing, and
    at `close`.
    """

    def __init__(self, path: str | os.PathLike[str], spec: DatasetSpec,
                 max_file_bytes: int = 1 << 30, update_every_s: float = 5.0):
        path = os.fspath(path)
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise ValueError(f"{path} exists and is not an empty directory: record into a "
                             "new one (nothing was written).")
        if max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be >= 1, got {max_file_bytes}.")
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.spec = spec
        self._fields = spec.fields()
        self._max_file_bytes = max_file_bytes
        self._update_every_s = update_every_s
        self._next_update = time.monotonic() + update_every_s
        self._file: tf.io.TFRecordWriter | None = None
        self._file_name = ""
        self._file_bytes = 0
        self._closed = False
        self._save_spec()

    @property
    def episodes(self) -> int:
        return self.spec.episodes

    def write(self, episode: Mapping[str, np.ndarray]) -> None:
        """Appends one episode: {field name: [T, ...] array} with every field of the spec
        (`DatasetSpec.fields`), T >= 1 (FIRST ... LAST)."""
        if self._closed:
            raise ValueError(f"The dataset writer of {self.path} is closed.")
        length = len(episode[STEP_TYPE])
        features = {}
        for name, (shape, dtype) in self._fields.items():
            column = np.asarray(episode[name])
            if column.shape != (length, *shape) or column.dtype != dtype:
                raise ValueError(f"Episode field {name} is {column.dtype}{list(column.shape)}; "
                                 f"the dataset's is {dtype}{[length, *shape]}.")
            features[name] = _feature(column)
        record = tf.train.Example(features=tf.train.Features(feature=features))
        data = record.SerializeToString()
        if self._file is None or self._file_bytes >= self._max_file_bytes:
            self._next_file()
        self._file.write(data)
        self._file.flush()
        self._file_bytes += len(data) + 16  # the frame: length, its CRC, data's CRC
        self.spec.episodes += 1
        self.spec.steps += length
        self.spec.files[self._file_name] += 1
        if time.monotonic() >= self._next_update:
            self._save_spec()

    def _next_file(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file_name = FILE_PATTERN.format(len(self.spec.files))
        self.spec.files[self._file_name] = 0
        self._file = tf.io.TFRecordWriter(os.path.join(self.path, self._file_name))
        self._file_bytes = 0
        self._save_spec()

    def _save_spec(self) -> None:
        write_json_atomically(spec_path(self.path), self.spec.to_json())
        self._next_update = time.monotonic() + self._update_every_s

    def close(self) -> None:
        """Closes the last file and writes the final spec (complete). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._file is not None:
            self._file.close()
        self.spec.complete = True
        self._save_spec()


class EpisodeRecorder:
    """Keeps the running episode of each environment slot and writes it when it ends.

    It takes the rows the inference server hands its adder (`add(slots, rows)`, the
    layout of `seed_agents.replay.unrolls.row_spec`). An episode starts at a FIRST row
    (rows of a slot that joined mid-episode are skipped until one) and is written at its
    LAST row; `reset(slots)` drops those slots' running episodes (a runner that
    disconnected: its partial episodes are never written), as does `close`.
    `max_episodes` stops writing after that many (None: no limit). Thread-safe.

    Rows land in a [slots, chunk] buffer per field, one array assignment per field for
    the whole batch; a slot whose chunk fills moves it (one copy) to its episode's list
    of chunks, so memory is one running episode per slot plus the buffers.
    """

    def __init__(self, writer: DatasetWriter, num_slots: int,
                 max_episodes: int | None = None, chunk: int = 64):
        if num_slots < 1 or chunk < 1:
            raise ValueError(f"num_slots ({num_slots}) and chunk ({chunk}) must be >= 1.")
        self._writer = writer
        self._extras = list(writer.spec.extras)
        self._names = [OBSERVATION, ACTION, REWARD, DISCOUNT, STEP_TYPE,
                       *(EXTRAS_PREFIX + name for name in self._extras)]
        fields = writer.spec.fields()
        self._buffers = [np.zeros((num_slots, chunk, *fields[name][0]), fields[name][1])
                         for name in self._names]
        self._chunk = chunk
        self._position = np.zeros(num_slots, np.int64)
        self._recording = np.zeros(num_slots, bool)
        self._chunks: list[list[list[np.ndarray]]] = [[] for _ in range(num_slots)]
        self._max_episodes = max_episodes
        self._lock = threading.Lock()
        self._closed = False

    @property
    def episodes(self) -> int:
        return self._writer.episodes

    def add(self, slots: np.ndarray, rows: Mapping[str, Any], states: Any = ()) -> None:
        del states  # episodes are stored without the policy's recurrent state
        extras = dict(tree.flatten_with_path(dict(rows[unrolls.EXTRAS])))
        leaves = [rows[unrolls.OBSERVATION], rows[unrolls.ACTION], rows[unrolls.REWARD],
                  rows[unrolls.DISCOUNT], rows[unrolls.STEP_TYPE],
                  *(extras[tuple(name.split("/"))] for name in self._extras)]
        slots = np.asarray(slots)
        step_type = np.asarray(rows[unrolls.STEP_TYPE])
        with self._lock:
            if self._closed:
                return
            first = step_type == FIRST
            if first.any():
                self._drop(slots[first])
                self._recording[slots[first]] = True
            recording = self._recording[slots]
            if not recording.all():
                slots, step_type = slots[recording], step_type[recording]
                leaves = [np.asarray(leaf)[recording] for leaf in leaves]
            position = self._position[slots]
            for buffer, leaf in zip(self._buffers, leaves, strict=True):
                buffer[slots, position] = leaf
            position += 1
            self._position[slots] = position
            last = step_type == LAST
            for slot in slots[(position == self._chunk) & ~last]:
                self._chunks[slot].append([buffer[slot].copy() for buffer in self._buffers])
                self._position[slot] = 0
            for slot in slots[last]:
                episode = self._episode(slot)
                self._drop(slot[None])
                if self._max_episodes is None or self.episodes < self._max_episodes:
                    self._writer.write(episode)

    def _episode(self, slot: int) -> dict[str, np.ndarray]:
        end = self._position[slot]
        return {name: np.concatenate([*(chunk[i] for chunk in self._chunks[slot]),
                                      buffer[slot, :end]])
                for i, (name, buffer) in enumerate(zip(self._names, self._buffers,
                                                       strict=True))}

    def _drop(self, slots: np.ndarray) -> None:
        for slot in slots.tolist():
            self._chunks[slot] = []
        self._position[slots] = 0
        self._recording[slots] = False

    def reset(self, slots: np.ndarray) -> None:
        with self._lock:
            self._drop(np.asarray(slots))

    def close(self) -> None:
        """Drops the running episodes and closes the dataset (complete). Idempotent."""
        with self._lock:
            self._closed = True
            self._drop(np.arange(len(self._position)))
            self._writer.close()


class RecordingAdder:
    """An adder that also records: every call goes to `adder` (None: none) and to
    `recorder`, so the inference server's one adder hook serves replay and recording."""

    def __init__(self, adder: Any, recorder: EpisodeRecorder):
        self._adder = adder
        self.recorder = recorder

    def add(self, slots: np.ndarray, rows: Mapping[str, Any], states: Any = ()) -> None:
        if self._adder is not None:
            self._adder.add(slots, rows, states)
        self.recorder.add(slots, rows)

    def reset(self, slots: np.ndarray) -> None:
        if self._adder is not None:
            self._adder.reset(slots)
        self.recorder.reset(slots)

    def close(self) -> None:
        """Closes the replay adder's writer; the recorder is closed by its owner."""
        close = getattr(self._adder, "close", None)
        if close is not None:
            close()
