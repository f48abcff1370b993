"""Checkpoints: a learner's state and a run's counts, and a Reverb server's tables.

A run directory keeps them at stable paths, so a restarted run finds them:

    <logdir>/checkpoints/learner       TF checkpoints (tf.train.CheckpointManager)
    <logdir>/checkpoints/replay        Reverb's checkpoints: that directory is Reverb's alone
    <logdir>/checkpoints/replay.json   what the newest replay checkpoint holds (for people)

Learner state and counts are saved as one TF checkpoint, in the learner's thread between
two steps: a train step assigns many variables, and a snapshot taken from another thread
while it runs would mix two steps. The run's metadata is a JSON string variable of that
same checkpoint, so it can never disagree with the variables it describes, whenever a
kill lands. It carries a format version (`CHECKPOINT_FORMAT`), what run wrote it (the
agent's builder and the environment: `identity`), the counts (env steps, learner
steps...) and the state a resumed run continues from (`state`: the episode window, the
wall time so far).

Reverb 0.14 (`reverb.checkpointers.DefaultCheckpointer(path)`):
- a server built with a checkpointer on `path` loads the newest complete checkpoint there
  (a `<path>/<UTC time>/` directory holding a DONE file; one without DONE, e.g. cut short
  by a kill, is skipped), or starts empty when there is none;
- `client.checkpoint()` writes a new one and returns its absolute path, then deletes all
  other entries of `path` but the lexicographically last: one checkpoint is kept, and any
  file of ours placed in `path` would make Reverb delete its own checkpoints. Hence the
  metadata file beside the directory, not in it.
- a checkpoint whose tables the server does not have fails the server's construction
  (ValueError naming the table).

Importing this module does not import TensorFlow or Reverb: backends call
`check_resume` in processes that never need either.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from seed_agents.utils import storage
from seed_agents.utils.class_paths import same_class_path
from seed_agents.utils.counting import Counter
from seed_agents.utils.malloc import malloc_trim

_COUNTS = "counts"  # the checkpoint name of the run's metadata; learners cannot use it

CHECKPOINT_FORMAT = 1
"""The version of a learner checkpoint's metadata, which this code writes and reads.

0: the metadata variable held the counts alone (checkpoints written before versions);
   still read: their counts come back, the rest of a resumed run's state starts afresh.
1: {"format", "identity", "counts", "state"}.
A checkpoint of a newer format is refused with an error that says so.
"""


def learner_directory(logdir: str | os.PathLike[str]) -> str:
    """Where a run's learner checkpoints live."""
    return os.path.join(os.fspath(logdir), "checkpoints", "learner")


FINAL_RECORD = "final.json"
"""Beside a run's learner checkpoints: whether this piece's last save finished.

The driver writes {"saved": false} before the run starts; the learner overwrites it with
{"saved": true, "checkpoint": ..., "step": ...} once its last checkpoint is on disk. A
learner that a stop's bounds end mid-save leaves it false, and the run says so.
"""


def final_record_path(logdir: str | os.PathLike[str]) -> str:
    """The `FINAL_RECORD` of a run's learner."""
    return storage.join(learner_directory(logdir), FINAL_RECORD)


def start_final_record(logdir: str | os.PathLike[str]) -> None:
    """Marks this piece's last checkpoint as not (yet) saved; the driver calls this
    before any node starts."""
    storage.makedirs(learner_directory(logdir))
    storage.write_text(final_record_path(logdir), json.dumps({"saved": False}))


def read_final_record(logdir: str | os.PathLike[str]) -> dict[str, Any]:
    """The `FINAL_RECORD` ({} when there is none or it cannot be read)."""
    try:
        record = json.loads(storage.read_text(final_record_path(logdir)))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def replay_directory(logdir: str | os.PathLike[str]) -> str:
    """Where a run's Reverb checkpoints live (Reverb owns this directory: see above)."""
    return os.path.join(os.fspath(logdir), "checkpoints", "replay")


def replay_metadata_path(logdir: str | os.PathLike[str]) -> str:
    """The JSON file that says what the newest replay checkpoint holds."""
    return os.path.join(os.fspath(logdir), "checkpoints", "replay.json")


def has_learner_checkpoint(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` holds a TF checkpoint (its CheckpointManager's state file)."""
    return storage.isfile(storage.join(directory, "checkpoint"))


def has_replay_checkpoint(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` holds a complete Reverb checkpoint (one with a DONE file)."""
    return bool(complete_replay_checkpoints(directory))


def complete_replay_checkpoints(directory: str | os.PathLike[str]) -> list[str]:
    """The names of the complete Reverb checkpoints in `directory` (those with a DONE
    file, which Reverb writes last), oldest first: Reverb names them by their time."""
    if not storage.isdir(directory):
        return []
    return sorted(entry for entry in storage.listdir(directory)
                  if storage.isfile(storage.join(directory, entry, "DONE")))


def replay_staging_directory(logdir: str) -> str:
    """Where Reverb's checkpointer writes for a logdir that is a URL: Reverb needs a local
    path, so its checkpoints are made in this local directory and copied to the logdir
    (`ReplayCheckpointer(copy_to=...)`, `stage_replay_checkpoint`)."""
    import hashlib
    import tempfile

    digest = hashlib.sha256(logdir.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "seed-agents-replay", digest)


def stage_replay_checkpoint(logdir: str) -> str:
    """Copies the newest complete replay checkpoint of the URL `logdir` into its local
    staging directory (emptied first), where Reverb's checkpointer loads it as the server
    starts; returns that directory."""
    import shutil

    staging = replay_staging_directory(logdir)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    remote = replay_directory(logdir)
    complete = complete_replay_checkpoints(remote)
    if complete:
        storage.copy_tree(storage.join(remote, complete[-1]),
                          os.path.join(staging, complete[-1]), last=("DONE",))
    return staging


def check_resume(logdir: str | os.PathLike[str] | None, resume: bool) -> None:
    """Raises ValueError when `logdir`'s checkpoints and `resume` disagree.

    Without `resume` a logdir that holds checkpoints belongs to an earlier run, which a
    new run would overwrite; with it, there must be a learner checkpoint to continue.
    Changes nothing on disk.
    """
    if logdir is None:
        if resume:
            raise ValueError("resume=True needs the logdir of the run to resume.")
        return
    learner, replay = learner_directory(logdir), replay_directory(logdir)
    if not resume and (has_learner_checkpoint(learner) or has_replay_checkpoint(replay)):
        raise ValueError(
            f"{os.path.join(os.fspath(logdir), 'checkpoints')} holds checkpoints of an earlier "
            "run: pass resume=True (--resume) to continue that run, or choose another logdir. "
            "Nothing was changed."
        )
    if resume and not has_learner_checkpoint(learner):
        raise ValueError(
            f"resume=True, but {learner} holds no learner checkpoint to resume from: is "
            "this the logdir of the run? (A run checkpoints every checkpoint_every_s seconds "
            "and at shutdown.) Start afresh without resume."
        )


def write_json_atomically(path: str | os.PathLike[str], data: Any) -> None:
    """Writes `data` as JSON so that a reader (or a kill) sees the old or the new file."""
    temporary = f"{os.fspath(path)}.tmp"
    with storage.open_file(temporary, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        if not storage.is_url(temporary):
            os.fsync(f.fileno())
    storage.replace(temporary, path)


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """What a learner checkpoint holds, read without restoring it.

    Attributes:
      path: the checkpoint's path prefix (`.../ckpt-7`).
      step: the learner's "step" variable, if it has one.
      counts: the run's counts when it was saved (env_steps, learner_steps, ...).
      format: its metadata's `CHECKPOINT_FORMAT` (0: written before versions).
      identity: what run wrote it ("builder": the agent's builder class,
        "environment": the environment id); empty for format 0.
      state: the saved state of a run's parts by name (e.g. "episodes", "clock").
    """

    path: str
    step: int | None
    counts: dict[str, Any]
    format: int = CHECKPOINT_FORMAT
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    state: dict[str, Any] = dataclasses.field(default_factory=dict)


def _parse_metadata(text: str | bytes, path: str) -> dict[str, Any]:
    """A checkpoint's metadata in the current layout; raises ValueError for a newer format."""
    data = json.loads(text)
    if "format" not in data:  # format 0: the counts alone
        return {"format": 0, "identity": {}, "counts": data, "state": {}}
    if not isinstance(data["format"], int) or data["format"] > CHECKPOINT_FORMAT:
        raise ValueError(
            f"The checkpoint {path} has format {data['format']!r}, written by a newer "
            f"seed-agents; this one reads formats up to {CHECKPOINT_FORMAT}. Upgrade "
            "seed-agents to use it."
        )
    return {"format": data["format"], "identity": data.get("identity", {}),
            "counts": data.get("counts", {}), "state": data.get("state", {})}


def read_checkpoint_info(path: str) -> CheckpointInfo:
    """What the learner checkpoint at `path` (a prefix such as `.../ckpt-7`) holds.

    Raises:
      ValueError: for a checkpoint without the run's metadata (not a learner checkpoint
        of this toolkit) or of a newer format.
      tf.errors.NotFoundError: when there is no checkpoint at `path`.
    """
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    key = "{}/.ATTRIBUTES/VARIABLE_VALUE"
    if not reader.has_tensor(key.format(_COUNTS)):
        raise ValueError(f"{path} is not a seed-agents learner checkpoint: it has no "
                         f"{_COUNTS!r} metadata.")
    step = int(reader.get_tensor(key.format("step"))) if reader.has_tensor(
        key.format("step")) else None
    metadata = _parse_metadata(reader.get_tensor(key.format(_COUNTS)), path)
    return CheckpointInfo(path, step, metadata["counts"], metadata["format"],
                          metadata["identity"], metadata["state"])


def latest_checkpoint_info(directory: str | os.PathLike[str]) -> CheckpointInfo | None:
    """What the newest checkpoint in `directory` holds, or None when there is none."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(os.fspath(directory))
    return None if path is None else read_checkpoint_info(path)


def find_checkpoint(directory: str | os.PathLike[str], name: str | None = None) -> str:
    """The path prefix of a learner checkpoint in `directory`: the newest, or the one
    `name` names ("ckpt-7", "7", or a path prefix anywhere).

    Raises:
      ValueError: naming the directory and the checkpoints it holds, when there is none
        or none of that name.
    """
    import tensorflow as tf

    directory = os.fspath(directory)
    state = tf.train.get_checkpoint_state(directory) if storage.isdir(directory) else None
    available = list(state.all_model_checkpoint_paths) if state is not None else []
    if name is None:
        if not available:
            raise ValueError(f"{directory} holds no learner checkpoint: a run saves one every "
                             "checkpoint_every_s seconds and when it stops (a run without a "
                             "logdir or with --checkpoint-every-s 0 saves none).")
        return available[-1]
    if storage.exists(f"{name}.index"):
        return name
    wanted = name if name.startswith("ckpt-") else f"ckpt-{name}"
    for path in available:
        if os.path.basename(path) == wanted:
            return path
    names = ", ".join(os.path.basename(p) for p in available) or "none"
    raise ValueError(f"No checkpoint {name!r} in {directory}; it holds: {names}.")


def identity_mismatches(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """"key: found (expected)" for each identity key both name with different values
    (builders compared as `same_class_path` does: one file may import under two names)."""
    def differ(key: str) -> bool:
        if key == "builder":
            return not same_class_path(expected[key], found[key])
        return found[key] != expected[key]

    return [f"{key} {found[key]!r} (expected {expected[key]!r})"
            for key in sorted(expected) if key in found and differ(key)]


def _return_freed_memory() -> None:
    """Gives the pages a checkpoint's serialization freed back to the system.

    A save builds its tensors' (or a Reverb table's) serialized copies in buffers freed
    right after, and glibc keeps freed pages in the arena of the thread that allocated
    them: a Reverb server of the R2D2 soak grew 10-11 MiB at each 5-minute checkpoint and
    gave back only part of it, ~10 MiB over an hour. A trim costs milliseconds a save.
    """
    malloc_trim()


class Checkpointer:
    """Saves a learner's trackable objects and a run's metadata as one TF checkpoint.

    `objects` are what `Learner.checkpoint_objects()` returns (variables, networks,
    optimizers; their names are the checkpoint's keys). `counter` is the run's root
    counter: `save` stores its counts, `restore_latest` puts them back, so a restored
    run's env steps continue (and count toward its step budget). `state` names other
    parts of the run to continue, each with `save() -> JSON-able` and `restore(saved)`
    (the episode window, the run's clock); a part the checkpoint lacks (an older format)
    keeps its fresh state. `identity` says what run this is ({"builder": ...,
    "environment": ...}); a checkpoint of another run is refused on restore. The newest
    `max_to_keep` checkpoints are kept; a kill during `save` leaves the previous one the
    newest.

    Call `save`, `maybe_save` and `restore_latest` from the thread that steps the
    learner, between steps (see `run_learner`).
    """

    def __init__(
        self,
        objects: Mapping[str, Any],
        directory: str | os.PathLike[str],
        counter: Counter | None = None,
        every_s: float | None = 600.0,
        max_to_keep: int = 3,
        state: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
    ):
        import tensorflow as tf

        if _COUNTS in objects:
            raise ValueError(f"{_COUNTS!r} names the run's counts in a checkpoint; "
                             "give the learner's object another name.")
        if every_s is not None and every_s <= 0:
            raise ValueError(f"every_s must be > 0 (or None: save only when asked), "
                             f"got {every_s}.")
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}.")
        self.directory = os.fspath(directory)
        self.every_s = every_s
        self._objects = dict(objects)
        self._counter = counter
        self._state = dict(state or {})
        self._identity = dict(identity or {})
        with tf.device("/cpu:0"):  # strings have no GPU kernels
            self._counts = tf.Variable("{}", dtype=tf.string, trainable=False)
        self._checkpoint = tf.train.Checkpoint(**self._objects, **{_COUNTS: self._counts})
        self._manager = tf.train.CheckpointManager(self._checkpoint, self.directory,
                                                   max_to_keep=max_to_keep)
        self._last_save = time.monotonic()

    @property
    def latest(self) -> str | None:
        """The path prefix of the newest checkpoint, or None."""
        return self._manager.latest_checkpoint

    @property
    def step(self) -> int | None:
        """The current value of the learner's "step" variable, if it has one."""
        step = self._objects.get("step")
        return None if step is None else int(step.numpy())

    def save(self, final: bool = False) -> str:
        """Writes a checkpoint now; returns its path prefix. `final`: the run's last
        save, recorded in `FINAL_RECORD` once the checkpoint is complete."""
        metadata = {
            "format": CHECKPOINT_FORMAT,
            "identity": self._identity,
            "counts": self._counter.get_counts() if self._counter is not None else {},
            "state": {name: part.save() for name, part in self._state.items()},
        }
        self._counts.assign(json.dumps(metadata))
        path = self._manager.save()
        _return_freed_memory()
        self._last_save = time.monotonic()
        if final:
            storage.write_text(os.path.join(self.directory, FINAL_RECORD), json.dumps(
                {"saved": True, "checkpoint": os.path.basename(path), "step": self.step}))
        return path

    def maybe_save(self) -> str | None:
        """Saves when `every_s` seconds have passed since the last save (or restore)."""
        if self.every_s is None or time.monotonic() - self._last_save < self.every_s:
            return None
        return self.save()

    def _unmatched_objects(self, path: str) -> str:
        """Which of the learner's named objects the checkpoint lacks, and which it holds
        that the learner has not (a setting that adds an object, e.g. V-trace's
        `torso_learning_rate_scale`, changed between the runs); "" when they agree."""
        import tensorflow as tf
        from tensorflow.core.protobuf import trackable_object_graph_pb2

        # The root's children in the checkpoint's object graph, not the variables' paths:
        # a variable two objects share is saved once, under one of them.
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        try:
            graph.ParseFromString(tf.train.load_checkpoint(path).get_tensor(
                "_CHECKPOINTABLE_OBJECT_GRAPH"))
        except Exception:  # noqa: BLE001 - an unreadable graph: the restore's error says it
            return ""
        held = {child.local_name for child in graph.nodes[0].children} - {"save_counter"}
        mine = {*self._objects, _COUNTS}
        missing, extra = sorted(mine - held), sorted(held - mine)
        parts = ([f"the checkpoint has no {missing}"] if missing else []) + \
            ([f"it holds {extra}, which this learner has not"] if extra else [])
        return "; ".join(parts)

    def restore_latest(self) -> bool:
        """Restores the newest checkpoint, if there is one; returns whether there was.

        Raises ValueError (see `restore`) rather than training on a half-restored learner.
        """
        path = self._manager.latest_checkpoint
        if path is None:
            return False
        self.restore(path)
        return True

    def restore(self, path: str) -> CheckpointInfo:
        """Restores the checkpoint at `path` (a prefix, `.../ckpt-7`); returns what it held.

        Raises:
          ValueError: naming what does not match, when the checkpoint is of a newer
            format, of another run (`identity`: another agent or environment), or does
            not fit the objects (another network shape); nothing is restored then.
        """
        info = read_checkpoint_info(path)  # the format and identity, before any variable
        mismatches = identity_mismatches(self._identity, info.identity)
        if mismatches:
            raise ValueError(f"The checkpoint {path} is of another run: "
                             f"{'; '.join(mismatches)}.")
        try:
            self._checkpoint.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError) as error:  # unmatched objects, other shapes
            raise ValueError(f"The checkpoint {path} does not fit this learner "
                             f"({self._unmatched_objects(path) or 'another agent or network?'})"
                             f": {error}") from error
        if self._counter is not None:
            self._counter.restore({"counts": info.counts})
        for name, part in self._state.items():
            if name in info.state:
                part.restore(info.state[name])
        self._last_save = time.monotonic()
        return info


def run_learner(learner: Any, stop_event: threading.Event,
                checkpointer: Checkpointer | None = None) -> None:
    """Steps `learner` until `stop_event` is set, checkpointing between steps.

    The one learner loop of every backend. `checkpointer.maybe_save` runs after each
    step, and a last checkpoint is saved when the loop is stopped (recorded in
    `FINAL_RECORD` once complete); not when a step raised, because the learner's state
    may then be half-updated (the timer's last checkpoint stands).
    """
    while not stop_event.is_set():
        learner.step()
        if checkpointer is not None:
            checkpointer.maybe_save()
    if checkpointer is not None:
        checkpointer.save(final=True)


class ReplayCheckpointer:
    """Checkpoints a Reverb server every `every_s` seconds from a thread, and at `close`.

    The server must have been built with `reverb.checkpointers.DefaultCheckpointer`;
    `client.checkpoint()` writes where that points. With `copy_to` (a URL logdir's replay
    directory; Reverb writes to a local staging directory), each checkpoint is copied
    there, its DONE file last, and only the newest two are kept there. After each
    checkpoint the table sizes
    that `server_info` reports are written to `metadata_path` (exact when no writer
    inserts meanwhile, e.g. at shutdown or once a table is full). A checkpoint that fails
    on the timer is reported on stderr and tried again at the next tick; one that fails at
    `close` raises.
    """

    def __init__(self, client: Any, metadata_path: str | os.PathLike[str], every_s: float,
                 copy_to: str | None = None):
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}.")
        self._client = client
        self._copy_to = copy_to
        self._metadata_path = os.fspath(metadata_path)
        self._every_s = every_s
        self._lock = threading.Lock()  # the timer's checkpoint and close's never overlap
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-checkpointer",
                                        daemon=True)
        self._thread.start()

    def checkpoint(self) -> str:
        """Checkpoints the server now; returns the checkpoint's directory."""
        with self._lock:
            path = self._client.checkpoint()
            _return_freed_memory()
            items = {name: int(info.current_size)
                     for name, info in self._client.server_info().items()}
            if self._copy_to is not None:
                self._copy(path)
            storage.makedirs(os.path.dirname(self._metadata_path))
            write_json_atomically(self._metadata_path, {"path": path, "items": items})
        return path

    def _copy(self, path: str) -> None:
        """Copies the local checkpoint at `path` to `copy_to`; keeps the newest two there
        and locally (the staging directory would otherwise grow by a checkpoint a tick)."""
        import shutil

        name = os.path.basename(os.path.normpath(path))
        storage.copy_tree(path, storage.join(self._copy_to, name), last=("DONE",))
        for old in complete_replay_checkpoints(self._copy_to)[:-2]:
            storage.remove_tree(storage.join(self._copy_to, old))
        staging = os.path.dirname(os.path.normpath(path))
        for old in sorted(os.listdir(staging))[:-2]:
            shutil.rmtree(os.path.join(staging, old), ignore_errors=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.checkpoint()
            except Exception as error:  # noqa: BLE001 - reported; the next tick retries
                print(f"replay checkpoint failed: {error!r}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stops the timer and checkpoints once more; call before the server stops."""
        self._stop.set()
        self._thread.join()
        self.checkpoint()


def replay_items(client: Any) -> int:
    """Items in all of a Reverb server's tables."""
    return sum(int(info.current_size) for info in client.server_info().values())
