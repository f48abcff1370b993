"""Loggers: where counters and metrics go (terminal, CSV files, TensorBoard).

A logger takes flat `{name: value}` rows. Components log every step or so and leave
throttling to the logger, so the hot loop never has to decide whether a line is worth
printing. Every logger treats the row it is given as read-only: the same dict is often
fanned out to several loggers by a `Dispatcher`, and one must not see another's edits.
"""

from __future__ import annotations

import abc
import csv
import io
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import numpy as np

from seed_agents.utils import storage

_BAR_WIDTH = 20


class Logger(abc.ABC):
    """Receives rows of named values."""

    @abc.abstractmethod
    def write(self, data: Mapping[str, Any]) -> None:
        """Records one row. Must not modify `data`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flushes anything pending and releases resources."""


def _to_python(value: Any) -> Any:
    """Unwraps numpy scalars and single-element arrays into plain Python values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.item()
    return value


def format_value(value: Any) -> str:
    """Formats a value compactly for a terminal line.

    Ints get thousands separators; floats of 1,000 or more are rounded to an int (nobody
    reads the decimals of `steps_per_s`); smaller floats keep 4 significant digits.
    """
    value = _to_python(value)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{round(value):,}"
        return f"{value:.4g}"
    return str(value)


def progress_bar(fraction: float, width: int = _BAR_WIDTH) -> str:
    """Renders e.g. `[#########...........]  45%` for `fraction` in [0, 1] (clamped)."""
    fraction = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else 0.0
    filled = int(fraction * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {int(fraction * 100):3d}%"


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False


class TerminalLogger(Logger):
    """Prints rows as one-line summaries, at most once per `print_every_s` seconds.

    The first write always prints. Rows arriving inside the throttle interval are
    remembered, not printed; `flush()` prints the latest such row, `write(data,
    force=True)` prints `data` regardless of the interval, and `close()` flushes, so
    the final state of a run is always on screen.

    On a TTY the line is redrawn in place with a carriage return (and a newline on
    close); on anything else (files, pipes, CI logs) every printed row is its own line.
    With `redraw=False` every row is its own line on a TTY too, printed over whatever
    line another logger left open there (so a periodic report and a redrawn progress
    bar can share one terminal).
    """

    def __init__(
        self,
        label: str = "",
        total: float | None = None,
        progress_key: str = "env_steps",
        print_every_s: float = 1.0,
        stream: TextIO | None = None,
        keys: Sequence[str] | None = None,
        redraw: bool = True,
    ) -> None:
        self._label = label
        self._total = total
        self._progress_key = progress_key
        self._print_every_s = print_every_s
        # Resolved at construction, not import, so redirected/captured stdout is honoured.
        self._stream = sys.stdout if stream is None else stream
        self._keys = list(keys) if keys is not None else None
        self._tty = _is_tty(self._stream)
        self._redraw = redraw
        self._lock = threading.Lock()
        self._last_print: float | None = None
        self._pending: dict[str, Any] | None = None
        self._line_open = False  # TTY only: a redrawn line is on screen without "\n".

    def format_line(self, data: Mapping[str, Any]) -> str:
        """Returns the text `write` would print for `data`."""
        parts = []
        if self._total and self._progress_key in data:
            progress = float(_to_python(data[self._progress_key]))
            parts.append(progress_bar(progress / self._total))
        if self._label:
            parts.append(self._label)
        keys = self._keys if self._keys is not None else list(data)
        parts.extend(f"{k}={format_value(data[k])}" for k in keys if k in data)
        return " ".join(parts)

    def write(self, data: Mapping[str, Any], force: bool = False) -> None:
        """Prints `data` if the interval has passed (or `force`), else keeps it pending."""
        now = time.monotonic()
        with self._lock:
            due = self._last_print is None or now - self._last_print >= self._print_every_s
            if force or due:
                self._print(data, now)
            else:
                self._pending = dict(data)  # A copy: the caller may reuse its dict.

    def flush(self) -> None:
        """Prints the latest row held back by throttling, if any."""
        with self._lock:
            if self._pending is not None:
                self._print(self._pending, time.monotonic())

    def close(self) -> None:
        """Flushes, and on a TTY ends the redrawn line with a newline."""
        self.flush()
        with self._lock:
            if self._line_open:
                self._stream.write("\n")
                self._stream.flush()
                self._line_open = False

    def _print(self, data: Mapping[str, Any], now: float) -> None:
        # Caller holds the lock.
        line = self.format_line(data)
        if self._tty and self._redraw:
            # "\x1b[K" clears what is left of a longer previous line.
            self._stream.write(f"\r{line}\x1b[K")
            self._line_open = True
        elif self._tty:
            self._stream.write(f"\r\x1b[K{line}\n")
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        self._last_print = now
        self._pending = None


class CSVLogger(Logger):
    """Appends rows to `<directory>/<label>.csv`, one file per logger.

    The file is overwritten, or with `append=True` (a resumed run) continued: its header
    is kept, so new rows line up with the old ones, and a last row torn by a crash is cut
    off first. A new or empty file gets a header either way.

    The header is fixed by the first row's keys, because a CSV header cannot grow once
    rows are written without rewriting the whole file. Later rows may omit keys (the
    cell is left empty); keys not in the header are dropped, with one warning per new
    key name, since silently losing a metric is worse than a noisy log, but a warning
    every step would drown everything else. Emit every key in the first row (e.g. as
    NaN) if it must reach the CSV.

    The file is flushed after each row, so a crash loses at most the row in flight.
    """

    def __init__(self, directory: str | os.PathLike[str], label: str,
                 append: bool = False) -> None:
        storage.makedirs(directory)
        self.path = storage.join(directory, f"{label}.csv")
        if storage.is_url(self.path):
            header, self._file = _open_url_to_append(self.path) if append else (
                None, storage.open_file(self.path, "w"))
        else:
            header = _header_to_append_to(self.path) if append else None
            self._file = open(self.path, "a" if append else "w", newline="", encoding="utf-8")
        self._writer: csv.DictWriter[str] | None = None
        if header is not None:
            self._writer = csv.DictWriter(self._file, fieldnames=header, restval="",
                                          extrasaction="ignore")
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def write(self, data: Mapping[str, Any]) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = csv.DictWriter(
                    self._file, fieldnames=list(data), restval="", extrasaction="ignore"
                )
                self._writer.writeheader()
            fieldnames = self._writer.fieldnames
            unknown = [k for k in data if k not in fieldnames and k not in self._warned]
            if unknown:
                self._warned.update(unknown)
                warnings.warn(
                    f"CSVLogger({self.path}): dropping keys not in the header: {unknown}",
                    stacklevel=2,
                )
            self._writer.writerow({k: _to_python(v) for k, v in data.items()})
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _header_to_append_to(path: str) -> list[str] | None:
    """The header of the CSV file at `path`, or None when there is no file or no header.

    A row being written when the process was killed has no newline: it is cut off, so
    that appended rows start on a line of their own (rows are flushed whole, so it is the
    only one that can be torn).
    """
    if not os.path.exists(path):
        return None
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(size - 65536, 0)  # far longer than a row
        f.seek(start)
        tail = f.read()
        if tail and not tail.endswith(b"\n"):
            cut = tail.rfind(b"\n")
            if cut >= 0:
                f.truncate(start + cut + 1)
            elif start == 0:
                f.truncate(0)  # even the header was torn
            else:
                f.write(b"\n")
        f.seek(0)
        first = f.readline().decode("utf-8")
    if not first.strip():
        return None
    return next(csv.reader([first]))


def _open_url_to_append(path: str) -> tuple[list[str] | None, Any]:
    """`_header_to_append_to` and the file to append to, for a URL (an object store has no
    append: the file is written again with its rows, a torn last row cut off)."""
    held = storage.read_text(path) if storage.exists(path) else ""
    if held and not held.endswith("\n"):
        held = held[:held.rfind("\n") + 1]
    first = held.split("\n", 1)[0]
    f = storage.open_file(path, "w")
    f.write(held)
    return (next(csv.reader([first])) if first.strip() else None), f


class TensorBoardLogger(Logger):
    """Writes rows as TensorBoard scalars under `<directory>/tb/<label>`.

    Each numeric, finite value becomes a scalar named by its key; the step is the row's
    `step_key` value (e.g. env_steps or learner_steps), so curves of different runs line
    up by progress, not by how often they were logged; a row without it takes the last
    step plus one. Other values (strings, NaN) are skipped.

    The events are built as protocol buffers and written by TensorBoard's own event
    file writer, not by `tf.summary`: each `tf.summary.scalar` runs a TensorFlow op that
    leaves ~80 bytes of native memory behind (TF 2.14, measured: 1.3 KB per row of 16
    scalars, ~5 MiB an hour for a learner's row a second) and costs ~0.1 ms. The records
    are the ones `tf.summary.scalar` writes (a float32 tensor with the scalars plugin's
    metadata), and URLs (`gs://`) work, as TensorBoard writes through TensorFlow's file
    system when TensorFlow is installed. `every_s` drops rows that arrive sooner than that
    after the last written one (a learner logs every step). Events are flushed every
    `flush_every_s` seconds and on `close`.
    """

    def __init__(self, directory: str | os.PathLike[str], label: str,
                 step_key: str = "env_steps", every_s: float = 0.0,
                 flush_every_s: float = 5.0) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._tensor_pb2, self._float = tensor_pb2, types_pb2.DT_FLOAT
        self._scalar_metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
        self.path = os.path.join(os.fspath(directory), "tb", label)
        self._writer = EventFileWriter(self.path, flush_secs=flush_every_s)
        self._step_key = step_key
        self._every_s = every_s
        self._last_write: float | None = None
        self._step = -1
        self._lock = threading.Lock()
        self._closed = False

    def _value(self, tag: str, value: float) -> Any:
        tensor = self._tensor_pb2.TensorProto(dtype=self._float, float_val=[value])
        tensor.tensor_shape.SetInParent()  # a scalar: a shape with no dimensions
        return self._summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                               metadata=self._scalar_metadata)

    def write(self, data: Mapping[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            if self._closed or (self._last_write is not None
                                and now - self._last_write < self._every_s):
                return
            self._last_write = now
            step = _to_python(data.get(self._step_key))
            if isinstance(step, int | float) and math.isfinite(step):
                self._step = int(step)
            else:
                self._step += 1
            values = []
            for key, value in data.items():
                value = _to_python(value)
                if (isinstance(value, int | float) and not isinstance(value, bool)
                        and math.isfinite(value)):
                    values.append(self._value(key, float(value)))
            self._writer.add_event(self._event_pb2.Event(
                wall_time=time.time(), step=self._step,
                summary=self._summary_pb2.Summary(value=values)))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._writer.close()


class Dispatcher(Logger):
    """Writes every row to each of several loggers."""

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self._loggers = list(loggers)

    def write(self, data: Mapping[str, Any]) -> None:
        for logger in self._loggers:
            logger.write(data)

    def close(self) -> None:
        # Close every logger even if one fails, so no file is left open; then re-raise.
        errors = []
        for logger in self._loggers:
            try:
                logger.close()
            except Exception as e:  # Re-raised below.
                errors.append(e)
        if errors:
            raise errors[0]


class NoOpLogger(Logger):
    """Discards everything; for components whose output nobody wants."""

    def write(self, data: Mapping[str, Any]) -> None:
        del data

    def close(self) -> None:
        pass


def make_default_logger(
    label: str,
    directory: str | os.PathLike[str] | None = None,
    total: float | None = None,
    print_every_s: float = 1.0,
    stream: TextIO | None = None,
    append: bool = False,
    tensorboard: bool = False,
    step_key: str = "env_steps",
    keys: Sequence[str] | None = None,
    redraw: bool = True,
) -> Logger:
    """A terminal logger labelled `label`, plus a CSV file in `directory` when given, and
    with `tensorboard` TensorBoard events in `<directory>/tb/<label>` (steps from
    `step_key`).

    `stream` defaults to `sys.stdout` as it is when this is called; `append` continues an
    existing CSV file (see `CSVLogger`); `keys` limits what the terminal line shows (the
    files get every key) and `redraw` is the terminal's (see `TerminalLogger`).
    """
    terminal = TerminalLogger(label=label, total=total, progress_key=step_key,
                              print_every_s=print_every_s,
                              stream=stream, keys=keys, redraw=redraw)
    if directory is None:
        return terminal
    loggers: list[Logger] = [terminal, CSVLogger(directory, label, append=append)]
    if tensorboard:
        loggers.append(TensorBoardLogger(directory, label, step_key=step_key))
    return Dispatcher(loggers)
