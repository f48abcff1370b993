"""The nodes of an agent program, and the program an `Experiment` becomes.

Each node is a module-level function `node(context, **kwargs)` so that it pickles into any
process or Ray actor. Heavy imports (TensorFlow, Reverb) happen inside the nodes that
need them: a runner node imports neither.
"""

from __future__ import annotations

import logging
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
    from seed_agents.envs import environment_factory
    from seed_agents.specs import make_environment_spec

    env = environment_factory(experiment.environment)(experiment.seed)
    spec = make_environment_spec(env)
    env.close()
    make_networks = experiment.network_factory or experiment.builder.make_networks
    networks = make_networks(spec)
    policy = experiment.builder.make_policy(networks, spec, evaluation=evaluation,
                                            seed=experiment.seed, num_envs=experiment.num_envs)
    return spec, networks, policy


def replay_node(context: NodeContext, experiment: Experiment) -> None:
    """A Reverb server with the agent's tables (it listens on every interface)."""
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)
    import reverb

    spec, _, policy = _agent(experiment)
    server = reverb.Server(experiment.builder.make_replay_tables(spec, policy), port=None)
    try:
        context.publish("replay", f"{context.bind_host}:{server.port}")
        context.stop_event.wait()
    finally:
        server.stop()


def learner_node(context: NodeContext, experiment: Experiment) -> None:
    """The learner, with the central inference server on its own variables (SEED)."""
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads()
    from launch.control import ControlService
    from seed_agents.inference.grpc_service import InferenceService
    from seed_agents.inference.server import EpisodeStats, InferenceConfig
    from seed_agents.utils.counting import Counter
    from seed_agents.utils.loggers import CSVLogger, NoOpLogger

    builder = experiment.builder
    spec, networks, policy = _agent(experiment)
    counter, stats = Counter(), EpisodeStats()
    replay = context.handles["replay"]
    learner_logger = CSVLogger(context.logdir, "learner") if context.logdir else NoOpLogger()
    learner = builder.make_learner(networks, replay.address, counter, learner_logger)
    adder = builder.make_adder(replay.dereference(), experiment.num_envs, spec, policy,
                               context.stop_event)
    # A restarted runner reconnects under its node name, which frees its predecessor's
    # slots (see `InferenceServer.connect`), so the slots are exactly the program's. Its
    # new stream can open before gRPC notices the old one is gone: twice the streams.
    config = InferenceConfig(max_envs=experiment.num_envs,
                             max_batch_size=experiment.num_envs,
                             max_wait_ms=experiment.inference_max_wait_ms)
    inference = builder.make_inference_server(policy, spec, adder, config, counter, stats)
    service = InferenceService(inference, spec, address=f"{context.bind_host}:0",
                               max_runners=2 * experiment.num_runners)

    def status() -> dict[str, Any]:
        counts = counter.get_counts()
        return {**inference.status(), "env_steps": counts.get("env_steps", 0),
                "learner_steps": counts.get("learner_steps", 0)}

    control = ControlService(status, lambda: learner.get_variables(["policy"])[0],
                             address=f"{context.bind_host}:0")
    try:
        context.publish("inference", service.start())
        context.publish("control", control.start())
        learner.run(stop_event=context.stop_event)
    finally:
        service.stop()
        inference.close()
        control.stop()
        learner_logger.close()


def runner_node(context: NodeContext, environment: Any, num_envs: int, seed: int) -> None:
    """Environment runners streaming to the learner's inference service."""
    from seed_agents.inference.runner_process import run_runner

    run_runner(context.handles["inference"].dereference(), environment, num_envs, seed=seed,
               runner_id=context.name, stop_event=context.stop_event)


def evaluator_node(context: NodeContext, experiment: Experiment) -> None:
    """Plays greedy episodes with the learner's latest variables and logs their returns."""
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)
    from seed_agents.actors import PolicyActor
    from seed_agents.environment_loop import EnvironmentLoop
    from seed_agents.envs import environment_factory
    from seed_agents.utils.loggers import CSVLogger, NoOpLogger

    _, networks, policy = _agent(experiment, evaluation=True)
    control = context.handles["control"].dereference()
    env = environment_factory(experiment.environment)(experiment.seed + 999_983)
    loop = EnvironmentLoop(env, PolicyActor(policy), stop_event=context.stop_event)
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


