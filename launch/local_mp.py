"""The local multi-process backend: one OS process per node of the program.

For debugging a distributed agent on one machine. Each node runs in its own spawned
process (spawned, not forked: forking a process that runs TensorFlow or gRPC threads can
deadlock), its output goes to `<logdir>/logs/<node>.log` and, prefixed with the node's
name, to the console. Servers bind 127.0.0.1.

Failures: a runner that dies is restarted with exponential backoff (1 s doubling, at most
30 s) and counted; the replay, learner or evaluator dying stops the program with an error
naming the node and its log. Stopping (budget reached, Ctrl-C, an error) sends SIGTERM to
runners first and the replay last, waits up to 10 s in all, then kills what is left.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from launch.experiment import Experiment, RunResult
from launch.limiter import limit_remote_program
from launch.nodes import make_program
from launch.program import Node, NodeContext, Program, make_handles

_STOP_TIMEOUT_S = 10.0
_START_TIMEOUT_S = 180.0
_MAX_BACKOFF_S = 30.0
_STOP_ORDER = ("runner", "evaluator", "learner", "replay")


class NodeFailedError(RuntimeError):
    """A node that the program cannot run without has died."""


def _node_process(node: Node, addresses: dict[str, str], bind_host: str, run_dir: str,
                  log_path: str, published: Any) -> None:
    """Entry point of a node's process: logs to its file, stops on SIGTERM/SIGINT."""
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    # Both file descriptors, so that C++ output (Reverb, gRPC, TF) lands there too.
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(), stop_event),
                     daemon=True).start()
    context = NodeContext(
        name=node.name,
        handles=make_handles(node, addresses),
        bind_host=bind_host,
        stop_event=stop_event,
        publish=lambda key, address: published.put((node.name, key, address)),
        logdir=run_dir,
    )
    try:
        node.main(context, **node.kwargs)
    except BaseException:
        traceback.print_exc()
        log.flush()
        os._exit(1)
    log.flush()
    os._exit(0 if stop_event.is_set() else 3)


def _stop_when_orphaned(parent: int, stop_event: threading.Event) -> None:
    """Stops the node if the launcher dies without stopping it (e.g. SIGKILL)."""
    while not stop_event.wait(1.0):
        if os.getppid() != parent:
            stop_event.set()


class _Console:
    """Copies every node's new log lines to the console, prefixed with the node's name."""

    def __init__(self, logs: Path, stream: TextIO):
        self._logs = logs
        self._stream = stream
        self._offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.drain()

    def drain(self) -> None:
        for path in sorted(self._logs.glob("*.log")):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data.rfind(b"\n") + 1
            if not complete:
                continue
            self._offsets[path] = offset + complete
            for line in data[:complete].decode(errors="replace").splitlines():
                self._stream.write(f"[{path.stem}] {line}\n")
            self._stream.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.drain()


class _Supervisor:
    """Starts the program's processes, restarts crashed runners, stops everything."""

    def __init__(self, program: Program, run_dir: Path, bind_host: str = "127.0.0.1"):
        self._program = program
        self._run_dir = run_dir
        self._logs = run_dir / "logs"
        self._logs.mkdir(parents=True, exist_ok=True)
        self._bind_host = bind_host
        self._context = multiprocessing.get_context("spawn")
        self._published = self._context.Queue()
        self.addresses: dict[str, str] = {}
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self.restarts: dict[str, int] = {}
        self._restart_at: dict[str, float] = {}
        self._stopping = False

    def start_all(self) -> None:
        for node in self._program.nodes:
            self.wait_for(node.needs)
            self._start(node)
        self._write_pids()

    def _start(self, node: Node) -> None:
        process = self._context.Process(
            target=_node_process,
            args=(node, dict(self.addresses), self._bind_host, str(self._run_dir),
                  str(self._logs / f"{node.name}.log"), self._published),
            name=node.name,
            daemon=False,
        )
        process.start()
        self.processes[node.name] = process

    def wait_for(self, keys: tuple[str, ...]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not set(keys) <= set(self.addresses):
            self._drain_published(timeout_s=0.1)
            for name, process in self.processes.items():
                if process.exitcode is not None:
                    raise NodeFailedError(
                        f"{name} exited with code {process.exitcode} while starting; "
                        f"see {self._logs / (name + '.log')}"
                    )
            if time.monotonic() > deadline:
                raise NodeFailedError(f"No node published {sorted(set(keys) - set(self.addresses))}"
                                      f" within {_START_TIMEOUT_S:.0f} s; see {self._logs}")

    def _drain_published(self, timeout_s: float = 0.0) -> None:
        try:
            while True:
                _, key, address = self._published.get(timeout=timeout_s)
                self.addresses[key] = address
                timeout_s = 0.0
        except queue.Empty:
            pass

    def check(self) -> str | None:
        """Restarts due runners; returns why the program must stop, if it must."""
        now = time.monotonic()
        for node in self._program.nodes:
            process = self.processes[node.name]
            if process.exitcode is None:
                continue
            if not node.restartable:
                return (f"{node.name} died (exit code {process.exitcode}); "
                        f"see {self._logs / (node.name + '.log')}")
            if node.name not in self._restart_at:
                count = self.restarts.get(node.name, 0)
                self._restart_at[node.name] = now + min(2.0 ** count, _MAX_BACKOFF_S)
            elif now >= self._restart_at[node.name]:
                del self._restart_at[node.name]
                self.restarts[node.name] = self.restarts.get(node.name, 0) + 1
                self._start(node)
                self._write_pids()
        return None

    def _write_pids(self) -> None:
        pids = {name: p.pid for name, p in self.processes.items()}
        (self._run_dir / "nodes.json").write_text(json.dumps(pids))

    def stop_all(self) -> None:
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for group in _STOP_ORDER:
            members = [self.processes[n.name] for n in self._program.group(group)
                       if n.name in self.processes]
            for process in members:
                if process.exitcode is None:
                    process.terminate()
            for process in members:
                process.join(max(deadline - time.monotonic(), 0.0))
        for process in self.processes.values():
            if process.exitcode is None:
                process.kill()
                process.join(5.0)


def run_local_mp(experiment: Experiment, stream: TextIO | None = None) -> RunResult:
    """Runs `experiment` as one process per node until its budget, target or time limit.

    Ctrl-C stops the program gracefully (within 10 s) and re-raises KeyboardInterrupt.
    Raises ValueError before anything starts when the logdir's checkpoints and
    `experiment.resume` disagree. Checkpoints are the nodes' business: the learner node
    saves and restores the learner and the counts, the replay node the replay.
    """
    stream = stream or sys.stdout
    run_dir = Path(experiment.logdir or f"runs/local_mp-{time.strftime('%Y%m%d-%H%M%S')}")
    experiment = _with_logdir(experiment, str(run_dir))
    experiment.check_checkpoints()
    run_dir.mkdir(parents=True, exist_ok=True)
    program = make_program(experiment)
    supervisor = _Supervisor(program, run_dir)
    console = _Console(run_dir / "logs", stream)
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a scheduler, `kill`) stops the program as gracefully as Ctrl-C does.
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    with contextlib.ExitStack() as cleanup:
        if threading.current_thread() is threading.main_thread():
            cleanup.callback(signal.signal, signal.SIGTERM, previous)
        cleanup.callback(console.close)
        cleanup.callback(supervisor.stop_all)
        supervisor.start_all()
        supervisor.wait_for(("control",))
        result = limit_remote_program(
            experiment, supervisor.addresses["control"], str(run_dir), stream,
            restarts=lambda: sum(supervisor.restarts.values()),
            failure=supervisor.check, wait=stop.wait,
        )
    if "died" in result.stop_reason:
        raise NodeFailedError(result.stop_reason)
    return result


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _with_logdir(experiment: Experiment, logdir: str) -> Experiment:
    import dataclasses

    return dataclasses.replace(experiment, logdir=logdir)
