"""Where a run's files live: a local directory, or a URL that TensorFlow's filesystems open.

A run on a cluster whose machines come and go keeps its logdir where a new machine finds
it: a volume every machine mounts (a local path here), or object storage such as
`gs://bucket/runs/x` (TensorFlow opens `gs://` itself; `s3://` with `tensorflow-io`).
Every file of a run (learner checkpoints, `run.json`, the CSV logs, `nodes.json`) is
opened through these functions, which use the operating system for a local path and
`tf.io.gfile` for a URL. What needs a local path (Reverb's checkpointer, the node logs
of `local_mp`) works in a local directory that is copied to the URL (`copy_tree`).

Object stores have no append and no atomic rename: the CSV logger rewrites a file it
continues with what it held (and keeps it open: each flush uploads it whole, which suits
logs of kilobytes to megabytes), and `replace` copies then deletes. A reader never sees
a half-written object: an object appears whole or not at all.
"""

from __future__ import annotations

import os
import uuid
from typing import IO, Any

PathLike = str | os.PathLike[str]


def is_url(path: PathLike) -> bool:
    """Whether `path` names a filesystem by its scheme (`gs://...`), not a local path."""
    return "://" in os.fspath(path)


def join(path: PathLike, *parts: str) -> str:
    """`os.path.join`, which keeps a URL's `//` (it only ever adds `/`)."""
    return os.path.join(os.fspath(path), *parts)


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def exists(path: PathLike) -> bool:
    return _gfile().exists(os.fspath(path)) if is_url(path) else os.path.exists(path)


def isfile(path: PathLike) -> bool:
    if not is_url(path):
        return os.path.isfile(path)
    gfile = _gfile()
    return gfile.exists(os.fspath(path)) and not gfile.isdir(os.fspath(path))


def isdir(path: PathLike) -> bool:
    return _gfile().isdir(os.fspath(path)) if is_url(path) else os.path.isdir(path)


def listdir(path: PathLike) -> list[str]:
    """Entry names of a directory (a URL's subdirectories without their trailing `/`)."""
    if not is_url(path):
        return os.listdir(path)
    return [name.rstrip("/") for name in _gfile().listdir(os.fspath(path))]


def makedirs(path: PathLike) -> None:
    if is_url(path):
        _gfile().makedirs(os.fspath(path))
    else:
        os.makedirs(path, exist_ok=True)


def open_file(path: PathLike, mode: str = "r") -> IO[Any]:
    """`open` for a local path, `tf.io.gfile.GFile` for a URL (text modes read and write
    str; UTF-8 either way)."""
    if not is_url(path):
        return open(path, mode, encoding=None if "b" in mode else "utf-8",  # noqa: SIM115
                    newline=None if "b" in mode else "")
    gfile = _gfile()
    if "w" in mode and gfile.exists(os.fspath(path)):
        # Not every filesystem's writable file starts empty (TensorFlow's ram:// keeps
        # what was there): "w" replaces the file wherever it is.
        gfile.remove(os.fspath(path))
    return gfile.GFile(os.fspath(path), mode)


def read_text(path: PathLike) -> str:
    with open_file(path, "r") as f:
        return f.read()


def write_text(path: PathLike, text: str) -> None:
    """Writes `text` to a sibling temporary file, then moves it over `path`, so a reader
    sees the old file or the new one, never none or a part: `open_file`'s "w" on a URL
    removes the old object first (a reader polling `nodes.json` once found no file)."""
    temporary = f"{os.fspath(path)}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with open_file(temporary, "w") as f:
            f.write(text)
        replace(temporary, path)
    except BaseException:
        if exists(temporary):
            if is_url(temporary):
                _gfile().remove(temporary)
            else:
                os.remove(temporary)
        raise


def replace(source: PathLike, target: PathLike) -> None:
    """Moves `source` over `target`: atomic on a local filesystem (`os.replace`); on an
    object store a copy and a delete, where `target` is a whole object either way."""
    if is_url(source) or is_url(target):
        _gfile().rename(os.fspath(source), os.fspath(target), overwrite=True)
    else:
        os.replace(source, target)


def copy_tree(source: PathLike, target: PathLike, last: tuple[str, ...] = ()) -> int:
    """Copies every file under `source` to the same place under `target` (either may be a
    URL), overwriting; files named in `last` (completion markers, e.g. Reverb's `DONE`) go
    after all others, so that a copy cut off midway is never marked complete. Returns the
    number of files copied."""
    gfile = _gfile()
    files: list[tuple[str, str]] = []
    for directory, _, names in gfile.walk(os.fspath(source)):
        relative = os.path.relpath(directory, os.fspath(source))
        for name in names:
            files.append((relative, name))
    files.sort(key=lambda entry: entry[1] in last)
    for relative, name in files:
        destination = os.fspath(target) if relative == "." else join(target, relative)
        gfile.makedirs(destination)
        gfile.copy(join(source, relative, name), join(destination, name), overwrite=True)
    return len(files)


def remove_tree(path: PathLike) -> None:
    """Deletes a directory and everything under it (nothing when it is not there)."""
    if is_url(path):
        if _gfile().exists(os.fspath(path)):
            _gfile().rmtree(os.fspath(path))
    else:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
