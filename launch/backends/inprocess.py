"""The in-process backend: the experiment's program with every node a thread of this process.

This is the debugging backend (one process, one debugger) and the test default. It runs
the same `Program` as `local_mp` and `ray` (`launch.nodes.make_program`: replay ->
learner -> runners -> evaluator); only the handles differ: nodes publish objects, so a
runner thread calls the learner's `InferenceServer` directly and a debugger steps from
runner to policy to learner, and the driver and the evaluator read the learner's
`LocalControl`. With `transport="grpc"` the runners are processes of their own instead,
streaming to the learner's gRPC service as on a cluster.

Nodes start in program order, each once what it needs is published: the Reverb server,
then the learner (its dataset needs the table signatures; it restores a checkpoint on
resume before anything acts), then the runners and the evaluator. Shutdown runs the
other way round, node group by group: runners first (the inference server no longer
gets requests), the evaluator, the learner (its last checkpoint; its dataset times out
within a second), then Reverb (its last checkpoint, when it keeps them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, TextIO

import numpy as np

from launch.backends.busy_learner import (
    BUSY_LEARNER_S,
    WAITING,
    computing,
    wait_while_computing,
)
from launch.experiment import (
    Experiment,
    RunResult,
    start_final_checkpoint,
    with_final_checkpoint,
)
from launch.limiter import limit_program
from launch.nodes import make_program
from launch.program import (
    NODE_START_TIMEOUT_S,
    Node,
    NodeContext,
    Program,
    make_handles,
    require_no_node_restarts,
)
from launch.run_record import write_run_record
from seed_agents.inference.batcher import BatcherClosedError
from seed_agents.utils import storage
from seed_agents.utils.logdir_lock import hold_logdir
from seed_agents.utils.tf_threads import LEARNER_INTER_OP_THREADS, configure_tf_threads

_JOIN_TIMEOUT_S = 30.0
_STOP_ORDER = ("runner", "evaluator", "learner", "replay")


class _Nodes:
    """The program's nodes as named daemon threads (runner processes with gRPC); the
    first unexpected error of one is recorded and stops the program."""

    def __init__(self, program: Program, experiment: Experiment, stream: TextIO):
        self._program = program
        self._experiment = experiment
        self._stream = stream
        self._published = threading.Condition()
        self.addresses: dict[str, str | None] = {}
        self.objects: dict[str, Any] = {}
        self.errors: list[tuple[str, BaseException, str]] = []
        self.failed = threading.Event()
        self._stops: dict[str, threading.Event] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._processes: dict[str, multiprocessing.process.BaseProcess] = {}

    def _publish(self, key: str, address: str | None, local: Any = None) -> None:
        with self._published:
            self.addresses[key] = address
            self.objects[key] = local
            self._published.notify_all()

    def start_all(self) -> None:
        """Starts every node in order, each once its needs are published; raises
        RuntimeError naming a node that fails meanwhile."""
        for node in self._program.nodes:
            self.wait_for(node.needs)
            if node.group == "runner" and self._experiment.transport == "grpc":
                self._start_process(node)
            else:
                self._start_thread(node)

    def wait_for(self, keys: tuple[str, ...]) -> None:
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        with self._published:
            while missing := set(keys) - set(self.addresses):
                self.raise_first_error()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"No node published {sorted(missing)} within "
                                       f"{NODE_START_TIMEOUT_S:.0f} s.")
                self._published.wait(0.1)

    def handle(self, key: str) -> Any:
        """What `key` dereferences to in this process (the published object)."""
        return self.objects[key]

    def _start_thread(self, node: Node) -> None:
        stop = threading.Event()
        context = NodeContext(
            name=node.name,
            handles=make_handles(node, self.addresses, self.objects),
            bind_host="127.0.0.1",
            stop_event=stop,
            publish=self._publish,
            logdir=self._experiment.logdir,
            in_process=True,
            stream=self._stream,
        )

        def guarded() -> None:
            try:
                node.main(context, **node.kwargs)
                if not stop.is_set():
                    raise RuntimeError(f"{node.name} returned before it was asked to stop")
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                # A runner stopped while the server closes may see it closed: not an error.
                if not (stop.is_set() and isinstance(error, BatcherClosedError)):
                    self.errors.append((node.name, error, traceback.format_exc()))
                    self.failed.set()

        thread = threading.Thread(target=guarded, name=node.name, daemon=True)
        self._stops[node.name] = stop
        self._threads[node.name] = thread
        thread.start()

    def _start_process(self, node: Node) -> None:
        # Spawned, not forked: a child forked from a process running TensorFlow and gRPC
        # threads can deadlock, and a spawned runner imports neither TF nor Reverb.
        process = multiprocessing.get_context("spawn").Process(
            target=_node_process, args=(node, dict(self.addresses), self._experiment.logdir),
            name=node.name, daemon=True)
        process.start()
        self._processes[node.name] = process

    def failure(self) -> str | None:
        """Why the program must stop: a node raised, or a runner process died."""
        if self.errors:
            return f"{self.errors[0][0]} failed"
        dead = [name for name, p in self._processes.items() if p.exitcode not in (None, 0)]
        if dead:
            return f"runner process(es) {', '.join(dead)} failed"
        return None

    def raise_first_error(self) -> None:
        if self.errors:
            name, error, trace = self.errors[0]
            raise RuntimeError(f"{name} failed: {error!r}\n{trace}") from error

    def stop_all(self) -> None:
        """Stops the nodes group by group (runners first, the replay last), joining each
        group's threads (up to 30 s each: daemon threads, never left blocking the exit;
        a learner still computing then, up to `BUSY_LEARNER_S` more)."""
        for group in _STOP_ORDER:
            members = [node.name for node in self._program.group(group)]
            for name in members:
                if name in self._stops:
                    self._stops[name].set()
                process = self._processes.get(name)
                if process is not None and process.is_alive():
                    process.terminate()
            for name in members:
                if name in self._threads:
                    self._threads[name].join(_JOIN_TIMEOUT_S)
                    if group == "learner":
                        self._wait_for_busy_learner(self._threads[name])
                if name in self._processes:
                    _join_or_kill(self._processes[name])

    def _wait_for_busy_learner(self, thread: threading.Thread) -> None:
        """A learner thread still there after its 30 s: waited for while this process
        computes (its step in flight, then its last save; `launch.backends.busy_learner`), up to
        `BUSY_LEARNER_S`; the runners are stopped by now, so the CPU is the learner's.
        A second Ctrl-C ends the wait (KeyboardInterrupt: the threads are daemons)."""
        pid = os.getpid()
        if not (thread.is_alive() and computing(pid, thread.join, thread.is_alive)):
            return
        print(WAITING, file=self._stream, flush=True)
        wait_while_computing(pid, thread.join, thread.is_alive,
                             time.monotonic() + BUSY_LEARNER_S)


def _join_or_kill(process: multiprocessing.process.BaseProcess) -> None:
    process.join(10.0)
    if process.is_alive():
        process.kill()
        process.join(5.0)


def _node_process(node: Node, addresses: dict[str, str | None], logdir: str | None) -> None:
    """A node in a child process (a runner with `transport="grpc"`): SIGTERM and SIGINT
    stop it after the round trip in flight; its output goes to the parent's console."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    context = NodeContext(name=node.name, handles=make_handles(node, addresses),
                          bind_host="127.0.0.1", stop_event=stop,
                          publish=lambda *_args, **_kwargs: None, logdir=logdir)
    node.main(context, **node.kwargs)
    if not stop.is_set():
        sys.exit(3)


def run_inprocess(experiment: Experiment, stream: TextIO | None = None,
                  stop: threading.Event | None = None) -> RunResult:
    """Runs `experiment` in this process until its budget, target or time limit, or until
    another thread sets `stop` (e.g. a benchmark that stops after measuring a window).

    Raises RuntimeError naming the node when one fails; every node started is stopped in
    any case. Raises ValueError before anything starts when the logdir's checkpoints and
    `experiment.resume` disagree, or the environment's action spec does not suit the agent.
    """
    experiment.check_checkpoints()
    require_no_node_restarts(experiment, "inprocess")
    experiment.environment_spec()  # an action spec the agent cannot use fails here, first
    # Before any node: the process's pools are the backend's, sized for the learner and
    # the inference server that share them.
    configure_tf_threads(inter_op=LEARNER_INTER_OP_THREADS)
    import tensorflow as tf

    stream = stream or sys.stdout
    tf.random.set_seed(experiment.seed)
    np.random.seed(experiment.seed)
    with hold_logdir(experiment.logdir):  # None: nothing to hold
        if experiment.logdir:
            storage.makedirs(experiment.logdir)
            write_run_record(experiment, stream)
            start_final_checkpoint(experiment)

        nodes = _Nodes(make_program(experiment), experiment, stream)
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(nodes.stop_all)
            nodes.start_all()
            nodes.wait_for(("control",))  # without an evaluator no node waited for it
            control = nodes.handle("control")

            def failure() -> str | None:
                if stop is not None and stop.is_set():
                    return nodes.failure() or "stopped by the caller"
                return nodes.failure()

            result = limit_program(experiment, control, experiment.logdir, stream,
                                   failure=failure, wait=nodes.failed.wait, poll_s=0.05)
        nodes.raise_first_error()
        # The limiter's last status can be a sampling interval older than the end (a short
        # run may finish inside one, its learner's steps all unread); the learner closed its
        # rates on the way out, so their overall figures now cover the whole run.
        final = control.status()
        rates = {key: float(final.get(key, value)) for key, value in result.rates.items()}
        return with_final_checkpoint(experiment, dataclasses.replace(result, rates=rates))
