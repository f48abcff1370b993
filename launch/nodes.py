"""The nodes of an agent program, and the program an `Experiment` becomes.

Each node is a module-level function `node(context, **kwargs)` so that it pickles into any
process or Ray actor. Heavy imports (TensorFlow, Reverb) happen inside the nodes that
need them: a runner node imports neither.

Every backend runs this one program; only where the nodes run differs. In process
(`context.in_process`) the learner publishes its inference server and a `LocalControl`
as objects, so runner threads call the server directly and the driver and the
evaluator read the learner's counts and variables without a network in between.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from launch.experiment import Experiment, client_credentials
from launch.limiter import rates_every_s
from launch.program import Node, NodeContext, Program

log = logging.getLogger(__name__)


def make_program(experiment: Experiment) -> Program:
    """replay -> learner (+ inference and control) -> runners (or, with local inference,
    actors) -> evaluator."""
    central = experiment.inference == "central"
    # With a learner resource, replay and learner share the machine that offers it: a
    # network policy can then keep Reverb (which listens on every interface) to that one
    # machine (examples/deploy/networkpolicy.yaml).
    pinned = {experiment.learner_resource: 1.0} if experiment.learner_resource else {}
    runner_pinned = {experiment.runner_resource: 1.0} if experiment.runner_resource else {}
    nodes = [
        Node("replay", "replay", replay_node, {"experiment": experiment},
             publishes=("replay",), resources=pinned),
        Node("learner", "learner", learner_node, {"experiment": experiment},
             publishes=("inference", "control") if central else ("control",),
             needs=("replay",), num_gpus=experiment.learner_gpus, resources=pinned),
    ]
    for i in range(experiment.num_runners):
        if central:
            nodes.append(Node(
                f"runner-{i}", "runner", runner_node,
                {"environment": experiment.runner_environment,
                 "num_envs": experiment.envs_per_runner,
                 "seed": experiment.runner_seed(i), "log_every_s": rates_every_s(experiment),
                 "groups": experiment.groups_per_runner,
                 "cpu": i if experiment.pin_runners else None,
                 **client_credentials(experiment)},
                needs=("inference",), restartable=True, resources=runner_pinned,
            ))
        else:
            nodes.append(Node(f"actor-{i}", "runner", actor_node,
                              {"experiment": experiment, "index": i},
                              needs=("replay", "control")))
    if experiment.evaluate_every_s is not None:
        nodes.append(Node("evaluator", "evaluator", evaluator_node,
                          {"experiment": experiment}, needs=("control",)))
    return Program(nodes)


_LOCAL_INFERENCE_IN_PROCESS = ("inference='local' (a policy copy per actor) runs in process "
                               "only: use the inprocess backend, or inference='central'.")


def require_central_inference(experiment: Experiment) -> None:
    """Raises ValueError for local inference, which only the in-process backend runs: its
    actors count into the learner's counter, in the learner's process."""
    if experiment.inference != "central":
        raise ValueError(_LOCAL_INFERENCE_IN_PROCESS)


@dataclasses.dataclass
class LocalControl:
    """What the learner's control service answers, for nodes in the learner's process.

    `status()` and `variables()` as `launch.control.ControlClient` has them; local
    actors (inference="local") also step with the learner as their variable source and
    count into the run's counter and episode statistics.
    """

    status: Callable[[], dict[str, Any]]
    variables: Callable[[], list[np.ndarray]]
    learner: Any
    counter: Any
    stats: Any

    def close(self) -> None:
        """Nothing to release (a `ControlClient` closes its channel)."""


def _agent(experiment: Experiment, evaluation: bool = False,
           seed: int | None = None) -> tuple[Any, Any, Any]:
    spec = experiment.environment_spec()
    make_networks = experiment.network_factory or experiment.builder.make_networks
    networks = make_networks(spec)
    policy = experiment.builder.make_policy(
        networks, spec, evaluation=evaluation,
        seed=experiment.seed if seed is None else seed, num_envs=experiment.num_envs)
    return spec, networks, policy


def start_replay(experiment: Experiment, tables: list[Any]) -> tuple[Any, Any]:
    """The run's Reverb server and, when it is checkpointed, its `ReplayCheckpointer`.

    The replay is checkpointed when the builder says it is worth it (`checkpoint_replay`)
    and the run checkpoints; on resume the server loads the newest replay checkpoint as
    it starts. The caller closes the checkpointer (a last checkpoint) before it stops the
    server. Reverb writes to a local path: with a logdir that is a URL it writes to a
    local staging directory, loads from the newest checkpoint copied there from the
    logdir, and each checkpoint is copied to the logdir. Shared by the in-process backend
    and `replay_node`.
    """
    import reverb

    from seed_agents.utils import checkpointing, storage

    checkpointer = copy_to = None
    keep = experiment.builder.checkpoint_replay and (experiment.checkpointing
                                                     or experiment.resume)
    if keep:
        directory = checkpointing.replay_directory(experiment.logdir)
        if storage.is_url(experiment.logdir):
            copy_to = directory
            directory = checkpointing.stage_replay_checkpoint(experiment.logdir)
        checkpointer = reverb.checkpointers.DefaultCheckpointer(directory)
    # Without a checkpointer of ours Reverb makes a temporary directory for its own.
    server = reverb.Server(tables, port=experiment.replay_port or None,
                           checkpointer=checkpointer)
    saver = None
    if keep and experiment.checkpointing:
        saver = checkpointing.ReplayCheckpointer(
            server.localhost_client(), checkpointing.replay_metadata_path(experiment.logdir),
            experiment.checkpoint_every_s, copy_to=copy_to)
    return server, saver


def inference_service(experiment: Experiment, inference: Any, spec: Any, address: str) -> Any:
    """The run's gRPC `InferenceService` over `inference`, with the run's token and TLS.

    A restarted runner reconnects under its node name, which frees its predecessor's
    slots (see `InferenceServer.connect`) and ends the old stream, but the new stream can
    open before the old one is cleaned up: twice the runners' streams (a stream per group
    of a runner's environments). A stream may carry
    `envs_per_runner` environments, which bounds the largest message the service accepts.
    Shared by the in-process backend and `learner_node`.
    """
    from seed_agents.inference.grpc_service import InferenceService

    tls = experiment.tls
    return InferenceService(
        inference, spec, address=address,
        max_streams=2 * experiment.num_runners * experiment.groups_per_runner,
        auth_token=experiment.inference_token,
        server_credentials=tls.server_credentials() if tls is not None else None,
        max_envs_per_stream=experiment.envs_per_runner,
    )


_RETRIED_CONTROL_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def control_service(experiment: Experiment, status: Callable[[], dict[str, Any]],
                    variables: Callable[[], list[np.ndarray]], address: str) -> Any:
    """The learner's gRPC `ControlService`, guarded by the run's token and TLS as its
    inference service is: its `Variables` hand out the trained policy."""
    from launch.control import ControlService

    tls = experiment.tls
    return ControlService(status, variables, address=address,
                          auth_token=experiment.inference_token,
                          server_credentials=tls.server_credentials() if tls else None)


def learner_checkpointer(experiment: Experiment, learner: Any, counter: Any,
                         replay_items: int, stream: Any = None,
                         state: dict[str, Any] | None = None) -> Any:
    """The learner's `Checkpointer`, restored on resume; None when the run saves none.

    `state` are the parts of the run a resumed run continues from (the episode window,
    the clock; see `Checkpointer`). On resume it restores the learner, the counts and
    `state` and prints one line saying what came back; `replay_items` is the replay's
    size, read before the learner's dataset started sampling.
    """
    from seed_agents.utils import checkpointing

    if not (experiment.checkpointing or experiment.resume):
        return None
    checkpointer = checkpointing.Checkpointer(
        learner.checkpoint_objects(), checkpointing.learner_directory(experiment.logdir),
        counter, every_s=experiment.checkpoint_every_s or None, state=state,
        identity=experiment.identity)
    if experiment.resume:
        if not checkpointer.restore_latest():  # check_checkpoints saw one: it went away
            raise ValueError(f"No learner checkpoint in {checkpointer.directory} to resume.")
        replay = "" if experiment.builder.checkpoint_replay else " (not checkpointed)"
        print(f"resumed from {os.path.join(experiment.logdir, 'checkpoints')}: "
              f"learner step {checkpointer.step}, "
              f"env steps {counter.get_counts().get('env_steps', 0)}, "
              f"replay items {replay_items}{replay}", file=stream or sys.stdout, flush=True)
    return checkpointer if experiment.checkpointing else None


def make_learner_logger(logdir: str | None, append: bool, watch: Any = None,
                        stream: Any = None, tensorboard: bool = True) -> Any:
    """The learner's logger: `<logdir>/learner.csv` (every step) and, with `tensorboard`,
    TensorBoard events in `<logdir>/tb/learner` (at most one row a second: a scalar costs
    TensorFlow about 0.1 ms, too much on every step); nothing without a logdir. Shared
    by the in-process backend and `learner_node`.

    With `watch` (a `seed_agents.networks.health.CollapseWatch`), every row also goes to
    it, and its warning, when a collapse is seen, is printed to `stream` (the node's
    console) as it happens, logdir or not.
    """
    from seed_agents.utils.loggers import CSVLogger, Dispatcher, NoOpLogger, TensorBoardLogger

    if not logdir:
        logger = NoOpLogger()
    else:
        logger = Dispatcher([CSVLogger(logdir, "learner", append=append)] + (
            [TensorBoardLogger(logdir, "learner", step_key="learner_steps", every_s=1.0)]
            if tensorboard else []))
    return logger if watch is None else WatchedLogger(logger, watch, stream)


class WatchedLogger:
    """A logger that also shows each row to a `CollapseWatch` and prints what it warns."""

    def __init__(self, logger: Any, watch: Any, stream: Any = None):
        self._logger = logger
        self._watch = watch
        self._stream = stream

    def write(self, data: Any) -> None:
        self._logger.write(data)
        warning = self._watch.observe(data)
        if warning is not None:
            print(warning, file=self._stream or sys.stderr, flush=True)

    def close(self) -> None:
        self._logger.close()


def start_recording(experiment: Experiment, spec: Any, policy: Any, stream: Any) -> Any:
    """The `EpisodeRecorder` of a run with `experiment.record`: a new dataset of the
    training environments' episodes (the server's slots), made on the learner's machine
    (an RLDS one for `rlds:DIR`)."""
    from seed_agents.datasets import DatasetSpec, DatasetWriter, EpisodeRecorder
    from seed_agents.datasets.rlds import RLDSWriter, rlds_path

    environment = experiment.environment if isinstance(experiment.environment, str) else None
    behaviour = {"source": "train", "logdir": experiment.logdir,
                 "builder": experiment.identity["builder"], "seed": experiment.seed}
    dataset_spec = DatasetSpec.of(environment, spec, policy.extras_spec, behaviour)
    if (rlds_directory := rlds_path(experiment.record)) is not None:  # `--record rlds:DIR`
        writer = RLDSWriter(rlds_directory, dataset_spec)
    else:
        writer = DatasetWriter(experiment.record, dataset_spec)
    print(f"recording training episodes to {experiment.record}", file=stream or sys.stdout,
          flush=True)
    return EpisodeRecorder(writer, experiment.num_envs)


def replay_node(context: NodeContext, experiment: Experiment) -> None:
    """A Reverb server with the agent's tables (it listens on every interface)."""
    if not context.in_process:
        from seed_agents.utils.tf_threads import configure_tf_threads

        configure_tf_threads(1, 1)

    spec, _, policy = _agent(experiment)
    server, saver = start_replay(experiment, experiment.builder.make_replay_tables(spec, policy))
    try:
        context.publish("replay", f"{context.bind_host}:{server.port}")
        context.stop_event.wait()
    finally:
        try:
            if saver is not None:
                saver.close()  # the runners and the learner stopped first: nothing is torn
        finally:
            server.stop()


def learner_node(context: NodeContext, experiment: Experiment, restart: int = 0,
                 addresses: dict[str, str] | None = None) -> None:
    """The learner, with the central inference server on its own variables (SEED).

    Elsewhere it serves inference and control over gRPC; in process it publishes the
    inference server itself (runner threads call it; gRPC only for runner processes,
    `transport="grpc"`) and a `LocalControl`.

    A restarted learner (`restart` > 0, see `Experiment.max_node_restarts`) binds the
    `addresses` its predecessor published, so that runners and the evaluator reconnect
    to it by themselves, and appends to its predecessor's logs.
    """
    addresses = addresses or {}
    if not context.in_process:
        from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

        configure_tf_threads(inter_op=LEARNER_INTER_OP_THREADS)
    from launch.limiter import program_figures, program_status, start_program_rates
    from seed_agents.datasets import RecordingAdder
    from seed_agents.inference.server import EpisodeStats, InferenceConfig
    from seed_agents.networks.health import LIVE_FEATURES, CollapseWatch
    from seed_agents.utils.checkpointing import replay_items, run_learner
    from seed_agents.utils.counting import Counter, RunClock
    from seed_agents.utils.gc_tuning import gc_for_serving

    builder = experiment.builder
    if (line := experiment.precision_line()) is not None:
        print(line, file=context.out, flush=True)  # resolved here: the learner's machine
    spec, networks, policy = _agent(experiment)
    counter, stats, clock = Counter(), EpisodeStats(), RunClock()
    replay = context.handles["replay"]
    client = replay.dereference()
    # Read before the learner's dataset samples and before runners (who need the
    # inference service published below) insert: the count is what the replay restored.
    items = replay_items(client) if experiment.resume else 0
    watch = CollapseWatch()
    learner_logger = make_learner_logger(context.logdir, experiment.resume or restart > 0,
                                         watch, context.out, experiment.tensorboard)
    learner = builder.make_learner(networks, replay.address, counter, learner_logger)
    inference = service = recorder = adder = None
    state: dict[str, Any] = {"episodes": stats, "clock": clock}
    if experiment.inference == "central":
        adder = builder.make_adder(client, experiment.num_envs, spec, policy,
                                   context.stop_event)
        if experiment.record:
            recorder = start_recording(experiment, spec, policy, context.out)
            adder = RecordingAdder(adder, recorder)
        # A restarted runner reconnects under its node name, which frees its
        # predecessor's slots (see `InferenceServer.connect`), so the slots are exactly
        # the program's.
        config = InferenceConfig(max_envs=experiment.num_envs,
                                 max_batch_size=experiment.num_envs,
                                 max_wait_ms=experiment.inference_max_wait_ms,
                                 frame_stack=experiment.server_frame_stack)
        inference = builder.make_inference_server(policy, spec, adder, config, counter, stats)
        state["eval_episodes"] = inference.eval_stats
        if not (context.in_process and experiment.transport == "direct"):
            # In process: runner processes of this machine, at the experiment's address.
            address = (experiment.inference_address if context.in_process
                       else addresses.get("inference", f"{context.bind_host}:0"))
            service = inference_service(experiment, inference, spec, address)
    # Restored before anything acts: the episode window and the clock continue.
    checkpointer = learner_checkpointer(experiment, learner, counter, items, context.out,
                                        state)

    # The rates row of the whole program is measured here, where its parts live (the
    # counter, the inference server and a client of the replay); a client of its own,
    # so that reading the replay's figures never queues behind the adder's writes.
    stats_client = replay.dereference()
    rates = None

    def read_figures() -> dict[str, Any]:
        return program_figures(counter, inference, stats_client)

    def status() -> dict[str, Any]:
        episodes = inference.status() if inference is not None else stats.summary()
        if builder.logs_feature_health:  # for the progress line; NaN before a first step
            episodes = {**episodes, LIVE_FEATURES: (float("nan") if watch.latest is None
                                                    else watch.latest)}
        return program_status(counter, {**episodes, "resumed_wall_s": clock.before_s},
                              rates.overall if rates is not None else None)

    def variables() -> list[np.ndarray]:
        return learner.get_variables(["policy"])[0]

    control = None
    try:
        rates = start_program_rates(experiment, read_figures, context.logdir, context.stream)
        with gc_for_serving():  # built: the model and the program are here to stay
            if service is not None:
                context.publish("inference", service.start())
            elif inference is not None:
                context.publish("inference", None, local=inference)
            if context.in_process:
                context.publish("control", None,
                                local=LocalControl(status, variables, learner, counter, stats))
            else:
                control = control_service(experiment, status, variables, addresses.get(
                    "control", f"{context.bind_host}:0"))
                context.publish("control", control.start())
            run_learner(learner, context.stop_event, checkpointer)
    except BaseException as error:
        # Said before the services stop (seconds, which a stop's bound may cut short):
        # the traceback comes after them.
        print(f"learner: stopped by {type(error).__name__}: {error}; no last checkpoint",
              file=context.out, flush=True)
        raise
    finally:
        try:
            if rates is not None:
                rates.close()  # first: its last row reads the parts while they are up
        finally:
            if service is not None:
                service.stop()
            if inference is not None:
                inference.close()
            # What a stop must not lose closes first: the recording (after the server:
            # no episode ends meanwhile) and the logs. The Reverb streams come last, as
            # they can wait on the replay (a full queue, a rate limiter) until the stop's
            # bound kills this process.
            if recorder is not None:
                recorder.close()
            if control is not None:
                control.stop()
            learner_logger.close()
            if adder is not None and hasattr(adder, "close"):
                adder.close()  # its writer's stream, while the replay is still up
            if hasattr(learner, "close"):  # a learner need not derive from core.Learner
                learner.close()


def runner_node(context: NodeContext, environment: Any, num_envs: int, seed: int,
                log_every_s: float = 5.0, auth_token: str | None = None,
                tls: Any = None, groups: int = 1, cpu: int | None = None) -> None:
    """Environment runners: streaming to the learner's inference service, or in its
    process calling the inference server directly (a runner thread). `groups` > 1 steps
    the environments in groups, one stepping while the others' actions are computed.
    `cpu` pins a runner process to that CPU (`pin_to_cpu`); a runner thread is never
    pinned (it would pin the learner's process's threads it starts)."""
    target = context.handles["inference"].dereference()
    if isinstance(target, str):
        from seed_agents.inference.runner_process import run_runner

        run_runner(target, environment, num_envs, seed=seed, runner_id=context.name,
                   stop_event=context.stop_event, logdir=context.logdir,
                   log_every_s=log_every_s, auth_token=auth_token, tls=tls, groups=groups,
                   cpu=cpu)
        return
    from seed_agents.envs import environment_factory
    from seed_agents.inference.runner import EnvRunner, runner_reporter

    runner = EnvRunner(environment_factory(environment), num_envs, seed, groups)
    reporter = (runner_reporter(runner.figures, context.logdir, context.name, log_every_s)
                if context.logdir else None)
    # One client per group under one run_id: the server batches them as one runner.
    names = [context.name] if groups == 1 else [f"{context.name}/{g}" for g in range(groups)]
    run_id = uuid.uuid4().hex
    for name, size in zip(names, runner.group_sizes, strict=True):
        target.connect(name, size, run_id)
    try:
        runner.run([target.channel(name) for name in names], context.stop_event)
    finally:
        for name in names:
            target.disconnect(name)
        try:
            if reporter is not None:
                reporter.close()  # its last row covers the runner's last seconds
        finally:
            runner.close()


def actor_node(context: NodeContext, experiment: Experiment, index: int) -> None:
    """A local-inference actor (IMPALA style): its own policy copy, refreshed from the
    learner every 100 steps, writing its unrolls to the replay itself. In the learner's
    process only: it counts into the learner's counter and episode statistics."""
    from seed_agents.environment_loop import EnvironmentLoop
    from seed_agents.envs import environment_factory
    from seed_agents.utils.counting import Counter

    control = context.handles["control"].dereference()
    if not isinstance(control, LocalControl):
        raise ValueError(_LOCAL_INFERENCE_IN_PROCESS)
    builder = experiment.builder
    spec, networks, policy = _agent(experiment, seed=experiment.seed + 7919 * (index + 1))
    adder = builder.make_adder(context.handles["replay"].dereference(), 1, spec, policy,
                               context.stop_event)
    actor = builder.make_actor(policy, adder, control.learner, networks.variables,
                               update_period=100, env_id=index, action_spec=spec.actions)
    actor.update(wait=True)
    env = environment_factory(experiment.environment)(experiment.runner_seed(index))
    loop = EnvironmentLoop(env, actor, counter=Counter(), stop_event=context.stop_event)
    try:
        while not context.stop_event.is_set():
            result = loop.run_episode()
            control.counter.increment(env_steps=int(result["episode_length"]))
            if not context.stop_event.is_set():
                control.stats.record(np.array([result["episode_return"]]),
                                     np.array([result["episode_length"]]))
    finally:
        env.close()


def evaluator_node(context: NodeContext, experiment: Experiment) -> None:
    """Plays greedy episodes with the learner's latest variables and logs their returns."""
    if not context.in_process:
        from seed_agents.utils.tf_threads import configure_tf_threads

        configure_tf_threads(1, 1)
    import grpc

    from seed_agents.actors import PolicyActor
    from seed_agents.environment_loop import EnvironmentLoop
    from seed_agents.envs import environment_factory
    from seed_agents.utils.loggers import CSVLogger, NoOpLogger

    spec, networks, policy = _agent(experiment, evaluation=True)
    control = context.handles["control"].dereference(**client_credentials(experiment))
    variables = getattr(networks, "variables", None)
    if variables is None:
        # The evaluator observes; an agent it cannot follow still trains.
        print("evaluator: the agent's networks have no `variables` to load the learner's "
              "policy variables (learner.get_variables(['policy'])) into: no evaluation "
              "episodes in this run.", file=context.out, flush=True)
        context.stop_event.wait()
        control.close()
        return
    env = environment_factory(experiment.environment)(experiment.seed + 999_983)
    loop = EnvironmentLoop(env, PolicyActor(policy, action_spec=spec.actions),
                           stop_event=context.stop_event)
    logger = (CSVLogger(context.logdir, "evaluator", append=experiment.resume)
              if context.logdir else NoOpLogger())
    try:
        while not context.stop_event.is_set():
            try:
                status, values = control.status(), control.variables()
            except grpc.RpcError as error:
                # A learner too busy to answer in time (or restarting) is no reason for
                # the evaluator, a vital node, to end the run; a refusal is.
                if error.code().name not in _RETRIED_CONTROL_CODES:
                    raise
                print(f"evaluator: the learner's control did not answer "
                      f"({error.code().name}); asking again", file=context.out, flush=True)
                context.stop_event.wait(1.0)
                continue
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
            result = loop.run_episode()
            if context.stop_event.is_set():
                break
            row = {"learner_steps": status["learner_steps"], "env_steps": status["env_steps"],
                   "eval_return": result["episode_return"]}
            logger.write(row)
            print(f"eval return {row['eval_return']:.1f} at {row['env_steps']:,} env steps",
                  file=context.out, flush=True)
            context.stop_event.wait(experiment.evaluate_every_s)
    finally:
        logger.close()
        control.close()
        env.close()
