"""The in-process backend: every component of an experiment as a thread of this process.

This is the debugging backend (one process, one debugger) and the test default. The
construction order matters and is the same in every backend:

1. probe one environment for its spec; build networks, policy and replay tables;
2. start the Reverb server, then the learner (its dataset needs the table signatures);
3. start the inference server, then the runners that connect to it.

Shutdown runs the other way round, driven by one `stop` event that every loop checks:
runners stop first (the inference server no longer gets requests), then the learner (its
dataset times out within a second), then Reverb.

Checkpoints (a logdir and `checkpoint_every_s`): the learner thread saves between steps
and at its end; the replay, when the builder keeps it, on a timer and just before Reverb
stops. On resume both are restored before anything acts or learns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TextIO

import numpy as np

from launch.experiment import Experiment, RunResult
from launch.limiter import (
    StepLimiter,
    program_figures,
    program_status,
    rates_every_s,
    start_program_rates,
)
from launch.nodes import learner_checkpointer, make_learner_logger, start_replay
from seed_agents.environment_loop import EnvironmentLoop
from seed_agents.envs.registry import environment_factory
from seed_agents.inference.batcher import BatcherClosedError
from seed_agents.inference.grpc_service import InferenceService
from seed_agents.inference.runner import EnvRunner, runner_reporter
from seed_agents.inference.runner_process import run_runner_until_signalled
from seed_agents.inference.server import EpisodeStats, InferenceConfig
from seed_agents.utils.checkpointing import replay_items, run_learner
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger, make_default_logger
from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

_JOIN_TIMEOUT_S = 30.0


class _Threads:
    """Named daemon threads whose first unexpected error stops everything."""

    def __init__(self, stop: threading.Event):
        self._stop = stop
        self.threads: list[threading.Thread] = []
        self.errors: list[tuple[str, BaseException, str]] = []

    def start(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def guarded():
            try:
                target()
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                if not (self._stop.is_set() and isinstance(error, BatcherClosedError)):
                    self.errors.append((name, error, traceback.format_exc()))
                self._stop.set()

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread


def run_inprocess(experiment: Experiment, stream: TextIO | None = None) -> RunResult:
    """Runs `experiment` in this process until its budget, target or time limit.

    Raises RuntimeError naming the component when one fails; everything started is
    stopped in any case (each component registers its own cleanup as it starts).
    Raises ValueError before anything starts when the logdir's checkpoints and
    `experiment.resume` disagree.
    """
    experiment.check_checkpoints()
    configure_tf_threads(inter_op=LEARNER_INTER_OP_THREADS)
    import tensorflow as tf

    stream = stream or sys.stdout
    tf.random.set_seed(experiment.seed)
    np.random.seed(experiment.seed)
    builder = experiment.builder
    make_env = environment_factory(experiment.environment)
    spec = experiment.environment_spec()
    make_networks = experiment.network_factory or builder.make_networks
    if (line := experiment.precision_line()) is not None:
        print(line, file=stream, flush=True)
    networks = make_networks(spec)
    policy = builder.make_policy(networks, spec, seed=experiment.seed,
                                 num_envs=experiment.num_envs)
    if experiment.logdir:
        os.makedirs(experiment.logdir, exist_ok=True)

    stop = threading.Event()
    threads = _Threads(stop)
    counter = Counter()
    stats = EpisodeStats()
    processes: list[multiprocessing.process.BaseProcess] = []
    with contextlib.ExitStack() as cleanup:
        # Callbacks run in reverse: stop runners first, then inference, learner, replay
        # (its last checkpoint, when it has them, just before it stops).
        replay, replay_saver = start_replay(experiment, builder.make_replay_tables(spec, policy))
        cleanup.callback(replay.stop)
        if replay_saver is not None:
            cleanup.callback(replay_saver.close)
        client = replay.localhost_client()
        # Counted before the learner's dataset samples: what the replay restored.
        items = replay_items(client) if experiment.resume else 0
        learner_logger: Logger = make_learner_logger(experiment.logdir, experiment.resume)
        cleanup.callback(learner_logger.close)
        learner = builder.make_learner(networks, f"localhost:{replay.port}", counter,
                                       learner_logger)
        checkpointer = learner_checkpointer(experiment, learner, counter, items, stream)
        learner_thread = threads.start("learner", functools.partial(
            run_learner, learner, stop, checkpointer))
        cleanup.callback(learner_thread.join, _JOIN_TIMEOUT_S)
        inference = None
        if experiment.inference == "central":
            adder = builder.make_adder(client, experiment.num_envs, spec, policy, stop)
            config = InferenceConfig(
                max_envs=experiment.num_envs,
                max_batch_size=experiment.num_envs,
                max_wait_ms=experiment.inference_max_wait_ms,
            )
            inference = builder.make_inference_server(policy, spec, adder, config, counter,
                                                      stats)
            cleanup.callback(inference.close)
        cleanup.callback(_join_all, threads, exclude=learner_thread)
        if experiment.transport == "grpc":
            service = InferenceService(inference, spec, address=experiment.inference_address,
                                       max_runners=experiment.num_runners)
            address = service.start()
            cleanup.callback(service.stop)
            processes = _start_runner_processes(experiment, address)
            cleanup.callback(_stop_processes, processes)
        elif experiment.inference == "central":
            for i in range(experiment.num_runners):
                runner = EnvRunner(make_env, experiment.envs_per_runner,
                                   experiment.runner_seed(i))
                if experiment.logdir:
                    # Closed once `stop` is set (callbacks run in reverse), its last row
                    # covering the runner's last seconds.
                    reporter = runner_reporter(runner.figures, experiment.logdir,
                                               f"runner-{i}", rates_every_s(experiment))
                    cleanup.callback(reporter.close)
                threads.start(f"runner-{i}", functools.partial(
                    _serve_runner, runner, inference, f"runner-{i}", stop))
        else:
            for i in range(experiment.num_runners):
                actor = _local_actor(builder, make_networks, spec, client, learner, stop, i,
                                     experiment)
                env = make_env(experiment.runner_seed(i))
                loop = EnvironmentLoop(env, actor, counter=Counter(), stop_event=stop)
                threads.start(f"actor-{i}", functools.partial(_run_actor, loop, counter,
                                                              stats, stop))
        cleanup.callback(stop.set)
        logger = make_default_logger(
            "train", experiment.logdir, total=experiment.max_env_steps,
            print_every_s=experiment.log_every_s, stream=stream, append=experiment.resume,
            tensorboard=True,
        )
        cleanup.callback(logger.close)

        # Closed first on the way out (before `stop` is set), so its last row reads
        # the program while it still runs. A replay client of its own, as in the learner
        # node: reading figures never queues behind the adders' writes.
        rates = start_program_rates(
            experiment, functools.partial(program_figures, counter, inference,
                                          replay.localhost_client()),
            experiment.logdir, stream)
        cleanup.callback(rates.close)

        def status() -> dict:
            episodes = inference.status() if inference is not None else stats.summary()
            return program_status(counter, episodes, rates.overall)

        def failure() -> str | None:
            dead = [p.name for p in processes if p.exitcode not in (None, 0)]
            if dead:
                return f"runner process(es) {', '.join(dead)} failed"
            return "a component failed" if stop.is_set() else None

        result = StepLimiter(experiment, status, logger).run(failure, stop.wait)
    if threads.errors:
        name, error, trace = threads.errors[0]
        raise RuntimeError(f"{name} failed: {error!r}\n{trace}") from error
    # The limiter's last status can be a sampling interval older than the end (a short
    # run may finish inside one, its learner's steps all unread); `rates` was closed on
    # the way out of the block above, so its overall figures now cover the whole run.
    final = {key: rates.overall.get(key, value) for key, value in result.rates.items()}
    return dataclasses.replace(result, rates=final)


def _join_all(threads: _Threads, exclude: threading.Thread) -> None:
    for thread in threads.threads:
        if thread is not exclude:
            thread.join(_JOIN_TIMEOUT_S)


def _start_runner_processes(
    experiment: Experiment, address: str
) -> list[multiprocessing.process.BaseProcess]:
    # Spawned, not forked: a child forked from a process running TensorFlow and gRPC
    # threads can deadlock, and a spawned runner imports neither TF nor Reverb.
    context = multiprocessing.get_context("spawn")
    processes = []
    for i in range(experiment.num_runners):
        process = context.Process(
            target=run_runner_until_signalled,
            kwargs=dict(address=address, environment=experiment.environment,
                        num_envs=experiment.envs_per_runner, seed=experiment.runner_seed(i),
                        runner_id=f"runner-{i}", logdir=experiment.logdir,
                        log_every_s=rates_every_s(experiment)),
            name=f"runner-{i}",
            daemon=True,
        )
        process.start()
        processes.append(process)
    return processes


def _stop_processes(processes: list[multiprocessing.process.BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(10.0)
        if process.is_alive():
            process.kill()
            process.join(5.0)


def _serve_runner(runner: EnvRunner, inference, client_id: str, stop: threading.Event) -> None:
    inference.connect(client_id, runner.num_envs)
    try:
        runner.run(functools.partial(inference.step, client_id), stop)
    finally:
        inference.disconnect(client_id)
        runner.close()


def _local_actor(builder, make_networks, spec, client, learner, stop, index, experiment):
    networks = make_networks(spec)
    policy = builder.make_policy(networks, spec, seed=experiment.seed + 7919 * (index + 1),
                                 num_envs=experiment.num_envs)
    adder = builder.make_adder(client, 1, spec, policy, stop)
    actor = builder.make_actor(policy, adder, learner, networks.variables, update_period=100,
                               env_id=index, action_spec=spec.actions)
    actor.update(wait=True)
    return actor


def _run_actor(loop: EnvironmentLoop, counter: Counter, stats: EpisodeStats,
               stop: threading.Event) -> None:
    while not stop.is_set():
        result = loop.run_episode()
        counter.increment(env_steps=int(result["episode_length"]))
        if not stop.is_set():
            stats.record(np.array([result["episode_return"]]),
                         np.array([result["episode_length"]]))
