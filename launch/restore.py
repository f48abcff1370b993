"""A trained run, loaded back: its builder, environment and networks as a checkpoint left
them. What `seed-agents eval` and `export` start from.

The run's own `run.json` (`launch.run_record`) rebuilds the builder and its config; the
networks are restored the way a resumed run restores them, through the agent's learner
(`learner.checkpoint_objects()`, with a Reverb server of the agent's tables in this
process for the learner's dataset to point at), so every agent that can resume can be
evaluated and exported, and a checkpoint that does not fit fails the same clear way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from launch.run_record import RunRecord, read_run_record
from seed_agents.utils.checkpointing import (
    CheckpointInfo,
    find_checkpoint,
    identity_mismatches,
    learner_directory,
    read_checkpoint_info,
)
from seed_agents.utils.class_paths import class_path, same_class_path


@dataclasses.dataclass
class RestoredRun:
    """A run's agent with the variables of one of its checkpoints.

    Attributes:
      logdir: the run's directory.
      record: its `run.json`.
      builder: the agent's builder, with the run's config.
      environment: the environment id it is restored for (the run's, or an override
        whose observations and actions match).
      spec: that environment's `EnvironmentSpec`.
      networks: the agent's networks, holding the checkpoint's values.
      checkpoint: what the restored checkpoint holds (path, learner step, counts).
    """

    logdir: str
    record: RunRecord
    builder: Any
    environment: str
    spec: Any
    networks: Any
    checkpoint: CheckpointInfo

    @property
    def num_envs(self) -> int:
        """The environments the run trained with (what its policy was made for)."""
        settings = self.record.experiment
        return int(settings.get("num_runners", 1)) * int(settings.get("envs_per_runner", 1))

    def make_policy(self, evaluation: bool, seed: int | None) -> Any:
        """The agent's policy on the restored networks: greedy (`evaluation`) or the
        behaviour policy of training, as the builder makes them."""
        return self.builder.make_policy(self.networks, self.spec, evaluation=evaluation,
                                        seed=seed, num_envs=max(self.num_envs, 1))


def load_run(
    logdir: str | os.PathLike[str],
    agents: Mapping[str, tuple[type, type]] | None = None,
    checkpoint: str | None = None,
    environment: str | None = None,
    builder: Any = None,
    network_factory: Callable[[Any], Any] | None = None,
) -> RestoredRun:
    """Loads the run in `logdir` with the variables of its newest (or `checkpoint`'s)
    learner checkpoint.

    Args:
      logdir: the run's directory (with `run.json` and `checkpoints/learner`).
      agents: name -> (builder type, config type) of the agents to rebuild a run's
        builder from (the command line's table); not needed with `builder`.
      checkpoint: "ckpt-7", "7" or a checkpoint's path prefix; None: the newest.
      environment: an environment id to restore the agent for instead of the run's; its
        observations and actions must be the run's.
      builder: the run's builder, for an agent `agents` does not know (a custom one).
      network_factory: `spec -> networks`, for a run trained with custom networks.

    Raises:
      ValueError: one error naming what does not match: no `run.json` or no checkpoint,
        a checkpoint of another agent or environment or of a newer format, an
        environment whose spec differs, a network that does not fit.
    """
    logdir = os.fspath(logdir)
    record = read_run_record(logdir)
    if builder is None:
        builder = record.make_builder(agents or {})
    elif not same_class_path(record.builder, class_path(type(builder))):
        raise ValueError(f"{logdir} was trained with {record.builder}, not "
                         f"{class_path(type(builder))}.")
    if record.network_factory is not None and network_factory is None:
        raise ValueError(f"{logdir} was trained with custom networks "
                         f"({record.network_factory}): load it from Python with "
                         "load_run(..., network_factory=...).")
    env_id = environment or record.environment
    if env_id is None:
        raise ValueError(f"{logdir} was trained on an environment factory, which run.json "
                         "cannot name: pass the environment id to use.")
    path = find_checkpoint(learner_directory(logdir), checkpoint)
    info = read_checkpoint_info(path)  # a newer format fails here, before any variable
    mismatches = identity_mismatches(record.identity, info.identity)
    if mismatches:
        raise ValueError(f"The checkpoint {path} is not of the run in {logdir}: "
                         f"{'; '.join(mismatches)}.")
    spec = _environment_spec(env_id)
    if environment is not None and record.environment not in (None, environment):
        _check_same_spec(spec, _environment_spec(record.environment), environment,
                         record.environment)
    networks = (network_factory or builder.make_networks)(spec)
    _restore_networks(builder, networks, spec, path, record)
    return RestoredRun(logdir, record, builder, env_id, spec, networks, info)


def _environment_spec(env_id: str) -> Any:
    from seed_agents.envs import environment_factory
    from seed_agents.specs import make_environment_spec

    env = environment_factory(env_id)(0)
    try:
        return make_environment_spec(env)
    finally:
        env.close()


def _describe(array_spec: Any) -> str:
    bounds = ""
    if hasattr(array_spec, "num_values"):
        bounds = f", {array_spec.num_values} values"
    return f"{tuple(array_spec.shape)} {array_spec.dtype}{bounds}"


def _check_same_spec(spec: Any, trained: Any, env_id: str, trained_id: str) -> None:
    for what in ("observations", "actions"):
        ours, theirs = getattr(spec, what), getattr(trained, what)
        if _describe(ours) != _describe(theirs):
            raise ValueError(f"{env_id}'s {what} are {_describe(ours)}; the run trained on "
                             f"{trained_id}, whose {what} are {_describe(theirs)}.")


def _restore_networks(builder: Any, networks: Any, spec: Any, path: str,
                      record: RunRecord) -> None:
    """Restores `networks` from the learner checkpoint at `path`, through a learner."""
    import reverb

    from seed_agents.utils.checkpointing import Checkpointer

    policy = builder.make_policy(networks, spec, evaluation=True, seed=0, num_envs=1)
    # A server of our own with the agent's tables: the learner's dataset needs one to
    # point at, and samples nothing from it.
    server = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    try:
        learner = builder.make_learner(networks, f"localhost:{server.port}")
        try:
            objects = learner.checkpoint_objects()
        except NotImplementedError as error:
            raise ValueError(f"{record.builder}'s learner keeps no checkpoints: {error}") \
                from error
        checkpointer = Checkpointer(objects, os.path.dirname(path), every_s=None,
                                    identity=record.identity)
        checkpointer.restore(path)
        del learner, checkpointer
    finally:
        server.stop()
