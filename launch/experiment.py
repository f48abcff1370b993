"""An experiment: what to train, on what, with how much acting, for how long."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from seed_agents.envs.registry import EnvironmentFactory, split_frame_stack
from seed_agents.inference.security import TLSConfig, make_token
from seed_agents.utils.checkpointing import check_resume
from seed_agents.utils.class_paths import class_path
from seed_agents.utils.trackers import DEFAULT_LOGGERS, TRACKERS, check_loggers

if TYPE_CHECKING:  # builders import TensorFlow; runner processes import this module
    from builders.base import AgentBuilder
    from seed_agents.specs import EnvironmentSpec


AUTO_GROUPS_MIN_ENVS = 128
"""Environments per runner from which runners step in two groups by default: on Pong
(benchmarks/atari_throughput.py, 2 cores) 2x128 in two groups acted 17-20% faster than in
lockstep, while with 64 per runner groups of 32 won or lost by a few percent."""


@dataclasses.dataclass
class Experiment:
    """Everything a backend needs to run an agent; the same object runs under any backend.

    Attributes:
      builder: the agent's recipe (e.g. `VTraceBuilder(VTraceConfig(...))`).
      environment: an environment id (`"gym:CartPole-v1"`, `"fake:obs=4"`) or a factory
        `seed -> dm_env.Environment` (it must pickle to run in other processes).
      network_factory: `env_spec -> networks`, overriding the builder's default networks.
      num_runners: environment runners (threads or processes, by backend).
      envs_per_runner: environments each runner steps (K).
      runner_groups: groups a runner's K environments step in, alternately: with 2, one
        group steps while the other's actions are computed (double-buffered sampling),
        hiding the inference round trip; 1 is SEED's lockstep. Same episodes either way.
        None (default): 2 where it was measured to win, K >= `AUTO_GROUPS_MIN_ENVS`
        (`groups_per_runner`); below that, half-size batches cost the policy more than
        the overlap saves.
      frame_stacking: where a stack of frames (Atari's `[84, 84, 4]`) is made: "runner"
        (each environment stacks its own), "server" (runners step single-frame
        environments, e.g. `atari:Pong,stack=1`, and send a quarter of the bytes; the
        inference server keeps each environment's stack: `InferenceConfig.frame_stack`),
        or "auto" (default): "server" for central inference on an id that can make
        single frames (`split_frame_stack`: `atari:` ids), else "runner". The policy,
        replay and recordings see the same stacked observations either way.
      pin_runners: runner i's process pins itself to the i-th CPU it may run on (modulo
        their number; `seed_agents.utils.affinity.pin_to_cpu`), so that each runner's
        emulators stay in one core's caches; the learner and inference server are not
        pinned. On Pong with 2 runners on 2 cores it acted 2-3% faster. Off by default:
        where other programs share the machine, a pinned runner cannot move off a busy
        core. Runner processes only (`transport="grpc"` or a cluster).
      max_env_steps: the step budget; the run stops when acting has taken this many steps.
      seed: base seed; runner i's environments use seed + 1000 * i + j.
      inference: "central" (SEED: runners ask the inference server) or "local" (each
        runner thread is an actor with its own policy copy; one environment per runner).
      target_return: stop early once the mean return of the last 100 episodes reaches it
        (of the evaluation environments' episodes when the policy has some).
      max_wall_s: stop after this many seconds of wall time, whatever the budget says.
      logdir: where CSV logs go; None logs to the terminal only.
      loggers: where metrics go besides the terminal (`seed_agents.utils.trackers.LOGGERS`):
        "csv" (always written, with a logdir: the run's own record), "tensorboard"
        (`<logdir>/tb/`), "wandb" and "mlflow" (trackers: the driver sends them the CSV
        logs' rows, the run's record and its final figures; `RunTrackers`). Trackers need
        a local logdir and their extra (`pip install 'seed-agents[wandb]'`).
      transport: how central-inference runners reach the server: "direct" (runner threads
        call it) or "grpc" (runner processes stream over gRPC, as on a cluster).
      inference_address: where the gRPC inference service listens ("127.0.0.1:0" picks a
        free port; "unix:/path" for same-host runners).
      inference_max_wait_ms: longest a runner's request waits for others to join a batch.
      log_every_s: seconds between progress lines.
      evaluate_every_s: an evaluator node plays one greedy episode with the learner's
        latest variables this often (in every backend; its returns go to
        `<logdir>/evaluator.csv`); None runs none.
      learner_gpus: GPUs a cluster backend reserves for the learner node.
      checkpoint_every_s: seconds between checkpoints of the learner (variables,
        optimizer, step), the run's counts and, when the builder's `checkpoint_replay`
        says so, the replay, in `<logdir>/checkpoints/{learner,replay}`; a stopped run
        also checkpoints once more on its way out (a killed one keeps the last timer
        checkpoint). None or 0 disables checkpointing; a run without a logdir (in-process
        only: the other backends always make one) keeps none.
      resume: continue the run whose checkpoints are in `logdir`: the learner, the
        counts (its env steps count toward `max_env_steps`), the last-100 episode window,
        the wall time so far (toward `max_wall_s`) and the replay are restored, CSV logs
        are appended to. Without it, a logdir that holds checkpoints is refused (see
        `check_checkpoints`), so an earlier run is never overwritten; with it, a run of
        another agent or environment than the logdir's `run.json` records is refused.
      max_node_restarts: how many times in a run a vital node that dies is started
        again instead of ending the run (0: it ends the run, with the node's error).
        Under `local_mp` the learner comes back from its newest checkpoint on the same
        addresses, so runners and the evaluator reconnect by themselves; under `ray`
        any vital node's death (its machine's, too) restarts the whole program wherever
        Ray places it, the learner and the replay from their newest checkpoints. What a
        restart loses (learner steps since the checkpoint, the episodes in progress) is
        printed. Needs checkpoints (`checkpoint_every_s`). Runners restart without it.
      inference_token: the shared secret of the run's gRPC inference service: every
        backend gives it to the service and to the runners, and the service refuses
        streams without it. A fresh random token per `Experiment` unless given (e.g.
        from `--inference-token-file`); None turns the check off (loopback only).
        Left out of the repr, so that it never reaches a log, of comparisons (two
        experiments that describe the same run differ only in their secrets) and of
        `run.json`: no file of the logdir holds it, so a resumed run takes its token
        from `--inference-token-file` again or makes a new one, which its runners get
        as a fresh run's do.
      tls: TLS for the inference service (certificate and key for the learner, the CA for
        the runners), or None: plain TCP, fine on one machine or a private network.
      replay_port: the Reverb server's port; 0 picks a free one. Pin it to name it in a
        firewall rule or network policy: Reverb listens on every interface.
      learner_resource: a custom Ray resource the replay and learner nodes each take one
        unit of, so that they run on the machine (pod) that offers it, and nowhere else.
      runner_resource: a custom Ray resource each runner takes one unit of, so that the
        runners step their environments on the machines that offer it (CPU machines,
        spot instances) and leave the learner's machine its cores.
      record: a new dataset directory where every training episode the runners produce
        is written whole as it ends (`seed_agents.datasets`): the inference server hands
        each environment's rows to a recorder beside its adder, on the learner's machine.
        Evaluation environments are not recorded; an environment whose runner
        disconnects loses its running episode. Central inference only. `rlds:DIR`
        writes an RLDS dataset instead (`seed_agents.datasets.rlds`).
      dataset: a recorded dataset to learn from instead of acting (offline; `rlds:DIR`
        for an RLDS one, e.g. a D4RL download): its
        episodes fill the agent's replay tables, no runner starts, and
        `max_learner_steps` is the budget (`launch.backends.offline.run_offline`).
      max_learner_steps: the learner-step budget of an offline run.

    A run with a logdir records this experiment in `<logdir>/run.json` as it starts
    (`launch.run_record`), so that `seed-agents eval`, `export` and `plot` rebuild it.
    """

    builder: AgentBuilder
    environment: str | EnvironmentFactory
    network_factory: Callable[[EnvironmentSpec], Any] | None = None
    num_runners: int = 4
    envs_per_runner: int = 16
    runner_groups: int | None = None
    frame_stacking: Literal["auto", "server", "runner"] = "auto"
    pin_runners: bool = False
    max_env_steps: int = 500_000
    seed: int = 0
    inference: Literal["central", "local"] = "central"
    target_return: float | None = None
    max_wall_s: float | None = None
    logdir: str | None = None
    loggers: tuple[str, ...] = DEFAULT_LOGGERS
    transport: Literal["direct", "grpc"] = "direct"
    inference_address: str = "127.0.0.1:0"
    inference_max_wait_ms: float = 2.0
    log_every_s: float = 1.0
    evaluate_every_s: float | None = 5.0
    learner_gpus: float = 0.0
    checkpoint_every_s: float | None = 600.0
    resume: bool = False
    max_node_restarts: int = 0
    # A secret: out of the repr and the comparisons, and (metadata "secret") never written
    # to run.json or any other file of the logdir (`launch.run_record`).
    inference_token: str | None = dataclasses.field(default_factory=make_token, repr=False,
                                                    compare=False, metadata={"secret": True})
    tls: TLSConfig | None = None
    replay_port: int = 0
    learner_resource: str | None = None
    runner_resource: str | None = None
    record: str | None = None
    dataset: str | None = None
    max_learner_steps: int = 20_000
    # The builder's class as the creating process names it (`class_path`), computed once
    # and carried to every node: a spawned child calls a script's module `__mp_main__`,
    # and a Ray worker unpickles a script's class under its own `__main__`.
    builder_path: str = dataclasses.field(default="", init=False, repr=False, compare=False)

    @property
    def groups_per_runner(self) -> int:
        """`runner_groups`, or where it is None the measured default: 2 groups once a
        runner has `AUTO_GROUPS_MIN_ENVS` environments (central inference), else 1."""
        if self.runner_groups is not None:
            return self.runner_groups
        central = self.inference == "central"
        return 2 if central and self.envs_per_runner >= AUTO_GROUPS_MIN_ENVS else 1

    @property
    def runner_environment(self) -> str | EnvironmentFactory:
        """What the runners step: `environment`, or its single-frame id where the
        inference server stacks the frames (`frame_stacking`)."""
        return self._frame_split()[0]

    @property
    def server_frame_stack(self) -> int:
        """Frames the inference server stacks per environment; 1: none (`frame_stacking`)."""
        return self._frame_split()[1]

    def _frame_split(self) -> tuple[str | EnvironmentFactory, int]:
        if (self.frame_stacking == "runner" or self.inference != "central"
                or not isinstance(self.environment, str)):
            return self.environment, 1
        return split_frame_stack(self.environment)

    def __post_init__(self):
        self.builder_path = class_path(type(self.builder))
        if self.frame_stacking not in ("auto", "server", "runner"):
            raise ValueError("frame_stacking must be 'auto', 'server' or 'runner', got "
                             f"{self.frame_stacking!r}.")
        if self.frame_stacking == "server" and self.server_frame_stack == 1:
            raise ValueError(
                "frame_stacking='server' needs central inference and an environment id "
                "whose observations stack frames the runners can send one at a time "
                f"(`atari:` with stack > 1), got {self.environment!r} with "
                f"inference={self.inference!r}.")
        if self.num_runners < 1:
            raise ValueError(f"num_runners must be >= 1, got {self.num_runners}.")
        if self.envs_per_runner < 1:
            raise ValueError(f"envs_per_runner must be >= 1, got {self.envs_per_runner}.")
        if self.runner_groups is not None and not 1 <= self.runner_groups <= self.envs_per_runner:
            raise ValueError(f"runner_groups must be in [1, envs_per_runner="
                             f"{self.envs_per_runner}], got {self.runner_groups}.")
        if self.max_env_steps < 1:
            raise ValueError(f"max_env_steps must be >= 1, got {self.max_env_steps}.")
        if self.inference not in ("central", "local"):
            raise ValueError(f"inference must be 'central' or 'local', got {self.inference!r}.")
        if self.inference == "local" and self.envs_per_runner != 1:
            raise ValueError(
                "inference='local' runs one environment per actor (IMPALA style): "
                f"set envs_per_runner=1, got {self.envs_per_runner}."
            )
        if self.transport not in ("direct", "grpc"):
            raise ValueError(f"transport must be 'direct' or 'grpc', got {self.transport!r}.")
        if self.transport == "grpc" and self.inference != "central":
            raise ValueError("transport='grpc' serves central inference; use inference='central'.")
        self.loggers = check_loggers(self.loggers)
        if self.trackers and not (self.logdir and "://" not in self.logdir):
            raise ValueError(f"loggers {list(self.trackers)} follow the run's CSV logs: give "
                             "a logdir on this machine (not a URL).")
        if self.max_wall_s is not None and self.max_wall_s <= 0:
            raise ValueError(f"max_wall_s must be > 0, got {self.max_wall_s}.")
        self.builder.check_num_envs(self.num_envs)
        if self.checkpoint_every_s is not None and self.checkpoint_every_s < 0:
            raise ValueError("checkpoint_every_s must be > 0 (or None or 0: no checkpoints), "
                             f"got {self.checkpoint_every_s}.")
        if self.max_node_restarts < 0:
            raise ValueError(f"max_node_restarts must be >= 0, got {self.max_node_restarts}.")
        if self.max_node_restarts and not self.checkpoint_every_s:
            raise ValueError("max_node_restarts restores the learner from its checkpoints: "
                             "set checkpoint_every_s (--checkpoint-every-s) too.")
        if self.resume and not self.logdir:
            raise ValueError("resume=True continues the run in logdir: pass its logdir.")
        if not 0 <= self.replay_port < 65536:
            raise ValueError(f"replay_port must be in [0, 65536), got {self.replay_port}.")
        if self.inference_token is not None and not self.inference_token.strip():
            raise ValueError("inference_token is empty: pass a token, or None for no check.")
        self._check_datasets()
        if self.tls is not None and not (self.tls.cert and self.tls.key):
            raise ValueError("tls needs the service's certificate and key (--tls-cert and "
                             "--tls-key); runners trust --tls-ca, or the certificate itself.")

    def _check_datasets(self) -> None:
        offline_only = getattr(self.builder, "requires_dataset", False)
        if offline_only and not self.dataset:
            raise ValueError(f"{type(self.builder).__name__} learns from a recorded dataset "
                             "only: pass one (--dataset DIR, made by `seed-agents record` "
                             "or `train --record`).")
        if self.dataset and self.record:
            raise ValueError("An offline run (dataset) has no runners to record: drop record.")
        if self.record and self.inference != "central":
            raise ValueError("record keeps the episodes the central inference server sees: "
                             "use inference='central'.")
        if self.max_learner_steps < 1:
            raise ValueError(f"max_learner_steps must be >= 1, got {self.max_learner_steps}.")

    @property
    def num_envs(self) -> int:
        return self.num_runners * self.envs_per_runner

    def runner_seed(self, runner: int) -> int:
        return self.seed + 1000 * runner

    @property
    def tensorboard(self) -> bool:
        """Whether the run writes TensorBoard events (`loggers`)."""
        return "tensorboard" in self.loggers

    @property
    def trackers(self) -> tuple[str, ...]:
        """The experiment trackers among `loggers` (W&B, MLflow)."""
        return tuple(name for name in self.loggers if name in TRACKERS)

    @property
    def checkpointing(self) -> bool:
        """Whether this run saves checkpoints (a logdir and a checkpoint interval)."""
        return bool(self.logdir and self.checkpoint_every_s)

    def environment_spec(self) -> EnvironmentSpec:
        """The environment's spec, read from one environment built with `seed` and
        checked against the agent (`builder.check_env_spec`).

        Raises:
          ValueError: For an action spec the toolkit does not support, or one the agent
            cannot act in (both messages name the spec).
        """
        from seed_agents.envs.registry import environment_factory
        from seed_agents.specs import make_environment_spec

        env = environment_factory(self.environment)(self.seed)
        try:
            spec = make_environment_spec(env)
        finally:
            env.close()
        self.builder.check_env_spec(spec)
        return spec

    def precision_line(self) -> str | None:
        """The run's "precision: ..." line (what the torso computes in, and why), or None
        when the agent's config has no `precision`. "auto" is resolved on this machine:
        call it in the process that builds the learner's networks."""
        precision = getattr(getattr(self.builder, "config", None), "precision", None)
        if precision is None:
            return None
        from seed_agents.utils.hardware import resolve_precision

        return resolve_precision(precision).describe()

    @property
    def identity(self) -> dict[str, Any]:
        """What makes two runs the same run, which a checkpoint records: the builder's
        class and the environment id (a factory has no id: it is not compared)."""
        identity: dict[str, Any] = {"builder": self.builder_path}
        if isinstance(self.environment, str):
            identity["environment"] = self.environment
        return identity

    def check_checkpoints(self) -> None:
        """Raises ValueError when the logdir's checkpoints and `resume` disagree, when
        `resume` would continue a run of another agent or environment, or when `record`
        names a directory that is not new or empty.

        Every backend calls this before it starts anything; it changes nothing on disk.
        """
        check_resume(self.logdir, self.resume)
        # `rlds:~/x` reaches us unexpanded (the shell expands only a leading `~`), and the
        # writers expand it: the check must look where they will write.
        record = self.record and os.path.expanduser(self.record.removeprefix("rlds:"))
        if record and os.path.exists(record) and (
                not os.path.isdir(record) or os.listdir(record)):
            raise ValueError(f"--record {self.record} exists and is not an empty directory: "
                             "record into a new one. Nothing was changed.")
        if self.resume:
            from launch.run_record import check_same_run

            check_same_run(self)


def client_credentials(experiment: Experiment) -> dict[str, Any]:
    """What a client of the learner's services (a runner, the evaluator, the step limiter)
    needs to be let in: the run's token, and TLS to trust (no key)."""
    tls = experiment.tls
    if tls is not None:
        tls = dataclasses.replace(tls, key=None)  # the private key stays with the learner
    return {"auth_token": experiment.inference_token, "tls": tls}


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a finished run reports.

    `rates` are the program's rates since it started (`launch.limiter.program_rates`
    keys, those in `SUMMARY_RATES`), as of the last status the limiter read; empty when
    the backend measured none.
    """

    env_steps: int
    episodes: int
    mean_return: float
    wall_s: float
    learner_steps: int
    steps_per_s: float
    logdir: str | None
    solved_env_steps: int | None = None
    solved_wall_s: float | None = None
    stop_reason: str = ""
    restarts: int = 0
    eval_mean_return: float | None = None
    rates: dict[str, float] = dataclasses.field(default_factory=dict)
    final_checkpoint_saved: bool | None = None
    newest_checkpoint: str | None = None

    @property
    def lost_final_checkpoint(self) -> bool:
        """Whether the run checkpointed but its learner's last save did not finish before
        the stop ended it (the newest checkpoint is then older than the run's end)."""
        return self.final_checkpoint_saved is False

    def summary(self) -> str:
        lines = [
            f"stopped: {self.stop_reason}",
            f"episodes: {self.episodes:,}",
            f"env steps: {self.env_steps:,} ({self.steps_per_s:,.0f}/s)",
            f"learner steps: {self.learner_steps:,}",
            f"mean return (last 100 episodes): {self.mean_return:.1f}",
            *([f"mean evaluation return (last 100 greedy episodes): "
               f"{self.eval_mean_return:.1f}"] if self.eval_mean_return is not None else []),
            f"wall time: {self.wall_s:.1f} s",
        ]
        if self.solved_env_steps is not None:
            lines.append(
                f"target return reached after {self.solved_env_steps:,} env steps, "
                f"{self.solved_wall_s:.1f} s"
            )
        if self.restarts:
            lines.append(f"runner restarts: {self.restarts}")
        lines.extend(_rates_lines(self.rates))
        if self.lost_final_checkpoint:
            lines.append("WARNING: the learner's last checkpoint did not finish before the "
                         f"stop ended it; the newest is {self.newest_checkpoint or 'none'}")
        elif self.final_checkpoint_saved:
            lines.append(f"last checkpoint: {self.newest_checkpoint}")
        lines.append(f"logs: {self.logdir or '(terminal only)'}")
        return "\n".join(lines)


def start_final_checkpoint(experiment: Experiment) -> None:
    """Before a checkpointing run's nodes start: its last save is not yet made (see
    `seed_agents.utils.checkpointing.FINAL_RECORD`). Every backend calls this."""
    if experiment.checkpointing:
        from seed_agents.utils.checkpointing import start_final_record

        start_final_record(experiment.logdir)


def with_final_checkpoint(experiment: Experiment, result: RunResult) -> RunResult:
    """`result` saying whether the learner's last save finished, and which checkpoint is
    the newest; every backend calls this once its nodes have stopped."""
    if not experiment.checkpointing:
        return result
    from seed_agents.utils.checkpointing import (
        latest_checkpoint_info,
        learner_directory,
        read_final_record,
    )

    record = read_final_record(experiment.logdir)
    saved = bool(record.get("saved"))
    info = latest_checkpoint_info(learner_directory(experiment.logdir))
    newest = None
    if info is not None:
        newest = info.path + ("" if info.step is None else f" (learner step {info.step:,})")
    # The result's counts are the limiter's last reading, taken as the stop began; a
    # learner that finished its step in flight after it saved a later step.
    learner_steps = max(result.learner_steps, int(record.get("step") or 0) if saved else 0)
    return dataclasses.replace(result, final_checkpoint_saved=saved, newest_checkpoint=newest,
                               learner_steps=learner_steps)


def _rates_lines(rates: dict[str, float]) -> list[str]:
    """The summary's lines about where the time went, averaged over the run; a part
    that was not measured is left out."""

    def have(*keys: str) -> bool:
        return all(k in rates and math.isfinite(rates[k]) for k in keys)

    lines = []
    if have("inference_batches_per_s", "mean_batch_size"):
        line = (f"inference: {rates['inference_batches_per_s']:,.1f} batches/s, "
                f"mean batch {rates['mean_batch_size']:,.1f} envs")
        if have("round_trip_p50_ms", "round_trip_p99_ms"):
            line += (f", round trip p50 {rates['round_trip_p50_ms']:.2f} ms, "
                     f"p99 {rates['round_trip_p99_ms']:.2f} ms (server side)")
        if have("inference_queue_wait_ms"):
            line += f", queue wait {rates['inference_queue_wait_ms']:.2f} ms"
        lines.append(line)
    if have("learner_steps_per_s", "learner_samples_per_s"):
        lines.append(f"learner: {rates['learner_steps_per_s']:,.1f} steps/s, "
                     f"{rates['learner_samples_per_s']:,.0f} samples/s")
    if have("replay_size", "replay_inserts_per_s", "replay_samples_per_s"):
        line = (f"replay: {rates['replay_size']:,.0f} items, "
                f"{rates['replay_inserts_per_s']:,.1f} inserts/s, "
                f"{rates['replay_samples_per_s']:,.1f} samples/s")
        if have("replay_sample_wait_frac", "replay_insert_wait_frac"):
            line += (f"; the learner waited for data {rates['replay_sample_wait_frac']:.0%} "
                     f"of the time, inserts for room {rates['replay_insert_wait_frac']:.0%}")
        lines.append(line)
    return lines
