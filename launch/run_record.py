"""A run's record, `<logdir>/run.json`: what was trained, on what, with which settings.

Every backend writes it as a run with a logdir starts (a resumed run updates it), so
that what comes after training (`seed-agents eval`, `export`, `plot`) rebuilds the same
agent without the command line that trained it:

    {"format": 1, "builder": "builders.vtrace.VTraceBuilder",
     "config_type": "seed_agents.agents.vtrace.config.VTraceConfig",
     "config": {"learning_rate": 0.001, "hidden_sizes": [64, 64], ...},
     "environment": "gym:CartPole-v1", "experiment": {"num_runners": 4, ...},
     "network_factory": null, "checkpoint_format": 1, "started": ["2026-11-23T10:00:00"]}

The config is the builder's `config` dataclass, field by field (tuples as JSON lists);
`read_run_record(...).make_builder(agents)` turns it back into the same builder with an
equal config. Classes are found by name in the table of agents the caller knows (the
command line's), never imported by name from the file.

Secrets are never recorded: an `Experiment` field marked `metadata={"secret": True}` (the
inference token) is left out, and a resumed run's record replaces an older one whole.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
from collections.abc import Mapping
from typing import Any, Protocol, TextIO

from seed_agents.utils import storage
from seed_agents.utils.checkpointing import CHECKPOINT_FORMAT, write_json_atomically
from seed_agents.utils.class_paths import class_path, same_class_path

RUN_RECORD_FORMAT = 1
RUN_FILE = "run.json"
# Experiment fields that are not settings of the run (or recorded apart).
_NOT_SETTINGS = ("builder", "environment", "network_factory", "logdir", "resume",
                 "builder_path")


class RecordedExperiment(Protocol):
    """What this module reads of a `launch.experiment.Experiment`, a dataclass whose other
    fields are recorded as settings. A protocol, not an import of `launch.experiment`:
    that module imports this one (`Experiment.check_checkpoints`)."""

    builder: Any
    environment: Any
    network_factory: Any
    logdir: str | None
    resume: bool

    @property
    def identity(self) -> dict[str, Any]: ...


def is_secret(field: dataclasses.Field) -> bool:
    """Whether a dataclass field holds a secret (`metadata={"secret": True}`, as
    `Experiment.inference_token`): a run's record never holds one, since a logdir may be
    a bucket that more people can read than may stream into the run."""
    return bool(field.metadata.get("secret"))


def run_record_path(logdir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(logdir), RUN_FILE)


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)  # not rebuildable; `make_builder` then fails naming the field


def _from_json(value: Any) -> Any:
    """Lists back to tuples: configs are frozen dataclasses of tuples."""
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What `run.json` holds (see the module's docstring).

    Attributes:
      builder: the builder's class, as `class_path` names it.
      config_type: the class of the builder's `config` dataclass, or None (a builder
        without one: its own dataclass fields are in `config`).
      config: the config's fields, JSON values.
      environment: the environment id, or None when the run was given a factory.
      experiment: the `Experiment`'s other settings (num_runners, seed, ...).
      network_factory: repr of a custom network factory, None for the builder's.
      started: ISO times the run started and each resume.
      checkpoint_format: the `CHECKPOINT_FORMAT` of the code that trained it.
    """

    builder: str
    config_type: str | None
    config: dict[str, Any]
    environment: str | None
    experiment: dict[str, Any]
    network_factory: str | None = None
    started: tuple[str, ...] = ()
    checkpoint_format: int = CHECKPOINT_FORMAT
    format: int = RUN_RECORD_FORMAT

    @classmethod
    def of(cls, experiment: RecordedExperiment) -> RunRecord:
        builder = experiment.builder
        config = getattr(builder, "config", None)
        if dataclasses.is_dataclass(config):
            config_type = class_path(type(config))
            fields = {f.name: _to_json(getattr(config, f.name))
                      for f in dataclasses.fields(config)}
        else:
            config_type = None
            fields = ({f.name: _to_json(getattr(builder, f.name))
                       for f in dataclasses.fields(builder)}
                      if dataclasses.is_dataclass(builder) else {})
        settings = {f.name: _to_json(getattr(experiment, f.name))
                    for f in dataclasses.fields(experiment)
                    if f.name not in _NOT_SETTINGS and not is_secret(f)}
        factory = experiment.network_factory
        return cls(
            builder=experiment.identity["builder"],
            config_type=config_type,
            config=fields,
            environment=experiment.environment if isinstance(experiment.environment, str)
            else None,
            experiment=settings,
            network_factory=None if factory is None else repr(factory),
        )

    @property
    def identity(self) -> dict[str, Any]:
        """As `Experiment.identity`: the builder and the environment id."""
        identity: dict[str, Any] = {"builder": self.builder}
        if self.environment is not None:
            identity["environment"] = self.environment
        return identity

    def agent_name(self, agents: Mapping[str, tuple[type, type]]) -> str | None:
        """The name under which `agents` (name -> (builder type, config type)) knows
        this run's builder, or None."""
        for name, (builder_type, _) in agents.items():
            if same_class_path(self.builder, class_path(builder_type)):
                return name
        return None

    def make_builder(self, agents: Mapping[str, tuple[type, type]]) -> Any:
        """The run's builder with its recorded config, from the agents `agents` knows.

        Raises:
          ValueError: naming the builder when `agents` does not know it, or the fields
            that do not fit when the config cannot be rebuilt.
        """
        name = self.agent_name(agents)
        if name is None:
            raise ValueError(
                f"The run was trained with builder {self.builder}, which is not one of the "
                f"agents seed-agents knows ({', '.join(sorted(agents))}): name it with "
                "--agent package.module:Builder (or a plug-in's name), or rebuild the run "
                "from Python with launch.restore.load_run(logdir, builder=...).")
        builder_type, config_type = agents[name]
        if (self.config_type is not None
                and not same_class_path(self.config_type, class_path(config_type))):
            raise ValueError(f"The run's config is a {self.config_type}; agent {name!r} "
                             f"takes a {class_path(config_type)}.")
        known = {f.name for f in dataclasses.fields(config_type)}
        unknown = sorted(set(self.config) - known)
        if unknown:
            raise ValueError(f"The run's {name} config has fields this version does not "
                             f"know: {', '.join(unknown)} (a newer seed-agents trained it?).")
        values = {key: _from_json(value) for key, value in self.config.items()}
        config = config_type(**values)
        # A builder that is a dataclass of its settings is its own config.
        return config if config_type is builder_type else builder_type(config)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["started"] = list(self.started)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str = RUN_FILE) -> RunRecord:
        """Raises ValueError for a record of a newer format or a malformed one."""
        version = data.get("format")
        if not isinstance(version, int) or version > RUN_RECORD_FORMAT:
            raise ValueError(f"{path} has format {version!r}, written by a newer seed-agents; "
                             f"this one reads formats up to {RUN_RECORD_FORMAT}.")
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            record = cls(**{k: v for k, v in data.items() if k in fields})
        except TypeError as error:
            raise ValueError(f"{path} is not a run record: {error}") from error
        return dataclasses.replace(record, started=tuple(record.started))


def read_run_record(logdir: str | os.PathLike[str]) -> RunRecord:
    """The record of the run in `logdir`.

    Raises:
      ValueError: when `logdir` has no `run.json` (not a run's logdir, or a run of a
        version that did not write one) or an unreadable one.
    """
    path = run_record_path(logdir)
    if not storage.isfile(path):
        what = ("is not a directory" if not storage.isdir(logdir)
                else f"has no {RUN_FILE}")
        raise ValueError(f"{os.fspath(logdir)} {what}: pass the logdir of a run (it "
                         f"records its agent, config and environment in {RUN_FILE} as it "
                         "starts).")
    try:
        data = json.loads(storage.read_text(path))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read {path}: {error}") from error
    return RunRecord.from_json(data, path)


def check_same_run(experiment: RecordedExperiment) -> None:
    """Raises ValueError, naming what differs, when `experiment` would resume a run of
    another agent or environment than its logdir's `run.json` records (a logdir without
    one, from before records, is not checked). Changes nothing on disk."""
    if not experiment.logdir or not storage.isfile(run_record_path(experiment.logdir)):
        return
    from seed_agents.utils.checkpointing import identity_mismatches

    recorded = read_run_record(experiment.logdir)
    mismatches = identity_mismatches(recorded.identity, experiment.identity)
    if mismatches:
        raise ValueError(
            f"--resume continues the run in {experiment.logdir}, which trained "
            f"{recorded.builder} on {recorded.environment}; this run has "
            f"{'; '.join(mismatches)}. Resume with the run's agent and environment, or "
            "choose another logdir. Nothing was changed.")


def config_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """"key: old -> new" for each config field whose value differs (or is new or gone)."""
    missing = object()
    return [f"{key}: {before.get(key, '(none)')} -> {after.get(key, '(none)')}"
            for key in sorted({*before, *after})
            if before.get(key, missing) != after.get(key, missing)]


def write_run_record(experiment: RecordedExperiment,
                     stream: TextIO | None = None) -> RunRecord | None:
    """Writes `<logdir>/run.json` for a run that starts (a resumed one keeps its earlier
    start times); None without a logdir. Call after `check_checkpoints`.

    A resumed run whose agent's config differs from the one its record holds (another
    preset, a changed `--set`) goes on with the new one, as its command line asks; the
    changed fields are printed to `stream` (stderr by default), since the checkpoint fits
    either way and nothing else would say so.
    """
    if not experiment.logdir:
        return None
    started: tuple[str, ...] = ()
    path = run_record_path(experiment.logdir)
    record = RunRecord.of(experiment)
    if experiment.resume and storage.isfile(path):
        previous = read_run_record(experiment.logdir)
        started = previous.started
        if changes := config_changes(previous.config, record.config):
            print(f"--resume: {experiment.logdir} goes on with settings that differ from "
                  f"its last piece's: {'; '.join(changes)}", file=stream or sys.stderr,
                  flush=True)
    now = datetime.datetime.now().isoformat(timespec="seconds")
    record = dataclasses.replace(record, started=(*started, now))
    storage.makedirs(experiment.logdir)
    write_json_atomically(path, record.to_json())
    return record
