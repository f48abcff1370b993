"""The nodes of an agent program, and the program an `Experiment` becomes.

Each node is a module-level function `node(context, **kwargs)` so that it pickles into any
process or Ray actor. Heavy imports (TensorFlow, Reverb) happen inside the nodes that
need them: a runner node imports neither.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from launch.experiment import Experiment
from launch.program import Node, NodeContext, Program

log = logging.getLogger(__name__)


def make_program(experiment: Experiment) -> Program:
    """replay -> learner (+ inference and control services) -> runners -> evaluator."""
    nodes = [
        Node("replay", "replay", replay_node, {"experiment": experiment},
             publishes=("replay",)),
        Node("learner", "learner", learner_node, {"experiment": experiment},
             publishes=("inference", "control"), needs=("replay",),
             num_gpus=experiment.learner_gpus),
    ]
    for i in range(experiment.num_runners):
        nodes.append(Node(
            f"runner-{i}", "runner", runner_node,
            {"environment": experiment.environment, "num_envs": experiment.envs_per_runner,
             "seed": experiment.runner_seed(i)},
            needs=("inference",), restartable=True,
        ))
    if experiment.evaluate_every_s is not None:
        nodes.append(Node("evaluator", "evaluator", evaluator_node,
                          {"experiment": experiment}, needs=("control",)))
    return Program(nodes)


def _agent(experiment: Experiment, evaluation: bool = False) -> tuple[Any, Any, Any]:
    spec = experiment.environment_spec()
    make_networks = experiment.network_factory or experiment.builder.make_networks
    networks = make_networks(spec)
    policy = experiment.builder.make_policy(networks, spec, evaluation=evaluation,
                                            seed=experiment.seed, num_envs=experiment.num_envs)
    return spec, networks, policy


def start_replay(experiment: Experiment, tables: list[Any]) -> tuple[Any, Any]:
    """The run's Reverb server and, when it is checkpointed, its `ReplayCheckpointer`.

    The replay is checkpointed when the builder says it is worth it (`checkpoint_replay`)
    and the run checkpoints; on resume the server loads the newest replay checkpoint as
    it starts. The caller closes the checkpointer (a last checkpoint) before it stops the
    server. Shared by the in-process backend and `replay_node`.
    """
    import reverb

    from seed_agents.utils import checkpointing

    checkpointer = None
    keep = experiment.builder.checkpoint_replay and (experiment.checkpointing
                                                     or experiment.resume)
    if keep:
        checkpointer = reverb.checkpointers.DefaultCheckpointer(
            checkpointing.replay_directory(experiment.logdir))
    # Without a checkpointer of ours Reverb makes a temporary directory for its own.
    server = reverb.Server(tables, port=None, checkpointer=checkpointer)
    saver = None
    if keep and experiment.checkpointing:
        saver = checkpointing.ReplayCheckpointer(
            server.localhost_client(), checkpointing.replay_metadata_path(experiment.logdir),
            experiment.checkpoint_every_s)
    return server, saver


def learner_checkpointer(experiment: Experiment, learner: Any, counter: Any,
                         replay_items: int, stream: Any = None) -> Any:
    """The learner's `Checkpointer`, restored on resume; None when the run saves none.

    On resume it restores the learner and the counts and prints one line saying what
    came back; `replay_items` is the replay's size, read before the learner's dataset
    started sampling. Shared by the in-process backend and `learner_node`.
    """
    from seed_agents.utils import checkpointing

    if not (experiment.checkpointing or experiment.resume):
        return None
    checkpointer = checkpointing.Checkpointer(
        learner.checkpoint_objects(), checkpointing.learner_directory(experiment.logdir),
        counter, every_s=experiment.checkpoint_every_s or None)
    if experiment.resume:
        if not checkpointer.restore_latest():  # check_checkpoints saw one: it went away
            raise ValueError(f"No learner checkpoint in {checkpointer.directory} to resume.")
        replay = "" if experiment.builder.checkpoint_replay else " (not checkpointed)"
        print(f"resumed from {os.path.join(experiment.logdir, 'checkpoints')}: "
              f"learner step {checkpointer.step}, "
              f"env steps {counter.get_counts().get('env_steps', 0)}, "
              f"replay items {replay_items}{replay}", file=stream or sys.stdout, flush=True)
    return checkpointer if experiment.checkpointing else None


def make_learner_logger(logdir: str | None, append: bool) -> Any:
    """The learner's logger: `<logdir>/learner.csv` (every step) and TensorBoard events
    in `<logdir>/tb/learner` (at most one row a second: a scalar costs TensorFlow about
    0.1 ms, too much on every step); nothing without a logdir. Shared by the in-process
    backend and `learner_node`."""
    from seed_agents.utils.loggers import CSVLogger, Dispatcher, NoOpLogger, TensorBoardLogger

    if not logdir:
        return NoOpLogger()
    return Dispatcher([CSVLogger(logdir, "learner", append=append),
                       TensorBoardLogger(logdir, "learner", step_key="learner_steps",
                                         every_s=1.0)])


def replay_node(context: NodeContext, experiment: Experiment) -> None:
    """A Reverb server with the agent's tables (it listens on every interface)."""
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


def learner_node(context: NodeContext, experiment: Experiment) -> None:
    """The learner, with the central inference server on its own variables (SEED)."""
    from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

    configure_tf_threads(inter_op=LEARNER_INTER_OP_THREADS)
    from launch.control import ControlService
    from launch.limiter import program_figures, program_status, start_program_rates
    from seed_agents.inference.grpc_service import InferenceService
    from seed_agents.inference.server import EpisodeStats, InferenceConfig
    from seed_agents.utils.checkpointing import replay_items, run_learner
    from seed_agents.utils.counting import Counter

    builder = experiment.builder
    if (line := experiment.precision_line()) is not None:
        print(line, flush=True)  # resolved here: the learner's machine may differ
    spec, networks, policy = _agent(experiment)
    counter, stats = Counter(), EpisodeStats()
    replay = context.handles["replay"]
    client = replay.dereference()
    # Read before the learner's dataset samples and before runners (who need the
    # inference service published below) insert: the count is what the replay restored.
    items = replay_items(client) if experiment.resume else 0
    learner_logger = make_learner_logger(context.logdir, experiment.resume)
    learner = builder.make_learner(networks, replay.address, counter, learner_logger)
    checkpointer = learner_checkpointer(experiment, learner, counter, items)
    adder = builder.make_adder(client, experiment.num_envs, spec, policy, context.stop_event)
    # A restarted runner reconnects under its node name, which frees its predecessor's
    # slots (see `InferenceServer.connect`), so the slots are exactly the program's. Its
    # new stream can open before gRPC notices the old one is gone: twice the streams.
    config = InferenceConfig(max_envs=experiment.num_envs,
                             max_batch_size=experiment.num_envs,
                             max_wait_ms=experiment.inference_max_wait_ms)
    inference = builder.make_inference_server(policy, spec, adder, config, counter, stats)
    service = InferenceService(inference, spec, address=f"{context.bind_host}:0",
                               max_runners=2 * experiment.num_runners)

    # The rates row of the whole program is measured here, where its parts live (the
    # counter, the inference server and a client of the replay); a client of its own,
    # so that reading the replay's figures never queues behind the adder's writes.
    stats_client = replay.dereference()
    rates = None

    def read_figures() -> dict[str, Any]:
        return program_figures(counter, inference, stats_client)

    def status() -> dict[str, Any]:
        return program_status(counter, inference.status(),
                              rates.overall if rates is not None else None)

    control = ControlService(status, lambda: learner.get_variables(["policy"])[0],
                             address=f"{context.bind_host}:0")
    try:
        rates = start_program_rates(experiment, read_figures, context.logdir)
        context.publish("inference", service.start())
        context.publish("control", control.start())
        run_learner(learner, context.stop_event, checkpointer)
    finally:
        try:
            if rates is not None:
                rates.close()  # first: its last row reads the parts while they are up
        finally:
            service.stop()
            inference.close()
            control.stop()
            learner_logger.close()


def runner_node(context: NodeContext, environment: Any, num_envs: int, seed: int) -> None:
    """Environment runners streaming to the learner's inference service."""
    from seed_agents.inference.runner_process import run_runner

    run_runner(context.handles["inference"].dereference(), environment, num_envs, seed=seed,
               runner_id=context.name, stop_event=context.stop_event, logdir=context.logdir)


def evaluator_node(context: NodeContext, experiment: Experiment) -> None:
    """Plays greedy episodes with the learner's latest variables and logs their returns."""
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)
    from seed_agents.actors import PolicyActor
    from seed_agents.environment_loop import EnvironmentLoop
    from seed_agents.envs import environment_factory
    from seed_agents.utils.loggers import CSVLogger, NoOpLogger

    spec, networks, policy = _agent(experiment, evaluation=True)
    control = context.handles["control"].dereference()
    env = environment_factory(experiment.environment)(experiment.seed + 999_983)
    loop = EnvironmentLoop(env, PolicyActor(policy, action_spec=spec.actions),
                           stop_event=context.stop_event)
    logger = CSVLogger(context.logdir, "evaluator") if context.logdir else NoOpLogger()
    try:
        while not context.stop_event.is_set():
            status = control.status()
            for variable, value in zip(networks.variables, control.variables(), strict=True):
                variable.assign(value)
            result = loop.run_episode()
            if context.stop_event.is_set():
                break
            row = {"learner_steps": status["learner_steps"], "env_steps": status["env_steps"],
                   "eval_return": result["episode_return"]}
            logger.write(row)
            print(f"eval return {row['eval_return']:.1f} at {row['env_steps']:,} env steps",
                  flush=True)
            context.stop_event.wait(experiment.evaluate_every_s)
    finally:
        logger.close()
        control.close()
        env.close()


