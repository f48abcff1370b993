"""The local multi-process backend: one OS process per node of the program.

For debugging a distributed agent on one machine. Each node runs in its own spawned
process (spawned, not forked: forking a process that runs TensorFlow or gRPC threads can
deadlock), its output goes to `<logdir>/logs/<node>.log` and, prefixed with the node's
name, to the console. Servers bind 127.0.0.1.

Failures: a runner that dies is restarted with exponential backoff (1 s doubling, at most
30 s) and counted. A vital node that dies is restarted the same way up to
`experiment.max_node_restarts` times in the run, and what the restart loses is printed:
the learner from its newest checkpoint and on the addresses it had (runners and the
evaluator reconnect by themselves); the replay on its port from its newest checkpoint
(if the agent checkpoints it), with the learner, whose dataset reads from it, stopped and
restarted after it (one restart for both); the evaluator as it was. Past that bound a
death stops the program with an error naming the node and its log.

Stopping (budget reached, Ctrl-C, an error) sends SIGTERM to runners first and the replay
last, waits up to 10 s in all, then kills what is left. The replay keeps its last 2 s
whatever the learner does: a learner blocked in a Reverb call (one that only returns once
the replay is gone, so that it never sees its SIGTERM) still leaves the replay time to
stop, which also frees the learner. One exception to the 10 s: a learner still computing
when its share runs out (a step of a large network on a slow CPU takes a minute; killed,
it would lose everything since its last timed checkpoint) is waited for while it computes,
up to 5 minutes, saying so on the console; a second Ctrl-C stops it at once.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from launch.backends.busy_learner import (
    BUSY_LEARNER_S,
    LOOK_S,
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
from launch.limiter import limit_remote_program
from launch.nodes import make_program, require_central_inference
from launch.program import (
    NODE_START_TIMEOUT_S,
    Node,
    NodeContext,
    Program,
    make_handles,
    restart_loss,
)
from launch.run_record import write_run_record
from seed_agents.utils import storage
from seed_agents.utils.checkpointing import has_replay_checkpoint, replay_directory
from seed_agents.utils.logdir_lock import hold_logdir

_STOP_TIMEOUT_S = 10.0
_KILL_TIMEOUT_S = 5.0
_LAST_GROUP_S = 2.0  # of _STOP_TIMEOUT_S, kept for the last group to stop (the replay)
_MAX_BACKOFF_S = 30.0
_SLOW_STOP_S = 5.0  # a stop slower than this names each node's time in the console
_ORPHAN_GRACE_S = 60.0  # a stopping learner may still save a checkpoint on a busy machine
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
    from seed_agents.utils.memory_profile import start_from_environment

    start_from_environment(node.name, log)  # opt-in: SEED_AGENTS_MEMORY_PROFILE
    context = NodeContext(
        name=node.name,
        handles=make_handles(node, addresses),
        bind_host=bind_host,
        stop_event=stop_event,
        publish=lambda key, address, local=None: published.put((node.name, key, address)),
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
    """Stops the node if the launcher dies without stopping it (e.g. SIGKILL), and ends
    the process if the node has not returned `_ORPHAN_GRACE_S` later.

    The hard end is for a node blocked on a peer that went with the launcher: a learner
    whose replay is gone waits in Reverb's sampler forever (measured: an orphaned
    learner still alive, and spending CPU, minutes after its run was killed). No
    supervisor is left to kill it, so the node does.
    """
    while os.getppid() == parent:  # also after a SIGTERM: the stop itself may hang
        time.sleep(1.0)
    stop_event.set()
    time.sleep(_ORPHAN_GRACE_S)
    print(f"the launcher is gone and this node did not stop within {_ORPHAN_GRACE_S:g} s: "
          "exiting", file=sys.stderr, flush=True)
    os._exit(4)


class _Console:
    """Copies every node's new log lines to the console, prefixed with the node's name.

    New: written after it started. A resumed run appends to its earlier pieces' logs,
    whose lines the console showed then; shown again they would read as this run's (an
    old "resumed from" line before the new one).
    """

    def __init__(self, logs: Path, stream: TextIO):
        self._logs = logs
        self._stream = stream
        self._offsets: dict[Path, int] = {path: path.stat().st_size
                                          for path in logs.glob("*.log")}
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
    """Starts the program's processes, restarts crashed runners (and, up to
    `max_node_restarts` times, the learner), stops everything."""

    def __init__(self, program: Program, run_dir: str | os.PathLike[str],
                 logs: Path | None = None, bind_host: str = "127.0.0.1",
                 max_node_restarts: int = 0, stream: TextIO | None = None):
        self._program = program
        self._max_node_restarts = max_node_restarts
        self._vital_restarts = 0
        self._stream = stream or sys.stdout
        self._run_dir = os.fspath(run_dir)
        self._logs = logs if logs is not None else Path(run_dir) / "logs"
        self._logs.mkdir(parents=True, exist_ok=True)
        self._bind_host = bind_host
        self._context = multiprocessing.get_context("spawn")
        self._published = self._context.Queue()
        self.addresses: dict[str, str] = {}
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self.restarts: dict[str, int] = {}
        self._restart_at: dict[str, float] = {}
        self._follows: set[str] = set()  # vital nodes whose restart is part of another's
        self._replay_port = 0
        self._stopping = False
        # Set by a second Ctrl-C while stopping: a learner still computing is not waited for.
        self.hurry = threading.Event()

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
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
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
                                      f" within {NODE_START_TIMEOUT_S:.0f} s; see {self._logs}")

    def _drain_published(self, timeout_s: float = 0.0) -> None:
        try:
            while True:
                _, key, address = self._published.get(timeout=timeout_s)
                self.addresses[key] = address
                if key == "replay":
                    self._replay_port = int(address.rsplit(":", 1)[1])
                timeout_s = 0.0
        except queue.Empty:
            pass

    def check(self) -> str | None:
        """Restarts due nodes; returns why the program must stop, if it must."""
        now = time.monotonic()
        self._drain_published()
        for node in self._program.nodes:
            process = self.processes[node.name]
            if process.exitcode is None:
                continue
            vital = not node.restartable
            if vital and not self._may_restart(node):
                return (f"{node.name} died (exit code {process.exitcode}); "
                        f"see {self._logs / (node.name + '.log')}")
            if node.name not in self._restart_at:
                count = self.restarts.get(node.name, 0)
                self._restart_at[node.name] = now + min(2.0 ** count, _MAX_BACKOFF_S)
                if node.group == "replay":
                    self._replay_lost(node, process.exitcode)
            elif now >= self._restart_at[node.name]:
                if node.group == "learner" and not set(node.needs) <= set(self.addresses):
                    continue  # it follows the replay's restart: once the replay is back
                del self._restart_at[node.name]
                self.restarts[node.name] = self.restarts.get(node.name, 0) + 1
                if vital:
                    follows = node.name in self._follows
                    self._follows.discard(node.name)
                    self._vital_restarts += 0 if follows else 1
                    node = self._restarted(node, process.exitcode, follows)
                self._start(node)
                self._write_pids()
        return None

    def _may_restart(self, node: Node) -> bool:
        """Whether the vital `node` that died comes back: within the run's
        `max_node_restarts`, or as part of a restart already counted (the learner after
        its replay's)."""
        return node.name in self._follows or self._vital_restarts < self._max_node_restarts

    def _replay_lost(self, node: Node, exitcode: int | None) -> None:
        """The replay died: the learner, whose dataset reads from it, is stopped too and
        comes back after it (one restart for both); prints what the restart loses."""
        self.addresses.pop("replay", None)  # published again by the new replay
        loses = ("it comes back from its newest checkpoint (items inserted after it are "
                 "lost)" if node.kwargs["experiment"].builder.checkpoint_replay
                 else "it comes back empty (its items are not checkpointed)")
        print(f"[local_mp] replay died (exit code {exitcode}); restart "
              f"{self._vital_restarts + 1} of {self._max_node_restarts}: {loses}, on its "
              "address; the learner stops and restarts after it.", file=self._stream,
              flush=True)
        for learner in self._program.group("learner"):
            self._follows.add(learner.name)
            if self.processes[learner.name].exitcode is None:
                self.processes[learner.name].terminate()

    def _restarted(self, node: Node, exitcode: int | None, follows: bool) -> Node:
        """A vital node again: the learner from its newest checkpoint, the replay on its
        port from its newest checkpoint, the evaluator as it was."""
        import dataclasses

        if node.group == "learner":
            why = "stopped with its replay" if follows else f"died (exit code {exitcode})"
            return self._restarted_learner(node, why)
        if node.group != "replay":
            print(f"[local_mp] {node.name} died (exit code {exitcode}); restart "
                  f"{self._vital_restarts} of {self._max_node_restarts}.", file=self._stream,
                  flush=True)
            return node
        experiment = node.kwargs["experiment"]
        resume = has_replay_checkpoint(replay_directory(experiment.logdir))
        replay = dataclasses.replace(experiment, replay_port=self._replay_port, resume=resume)
        return dataclasses.replace(node, kwargs={**node.kwargs, "experiment": replay})

    def _restarted_learner(self, node: Node, why: str) -> Node:
        """The learner node again, resuming from the newest checkpoint (if any) on the
        addresses it published; prints what the restart loses."""
        import dataclasses

        experiment = node.kwargs["experiment"]
        resume, restored = restart_loss(experiment.logdir)
        print(f"[local_mp] learner {why}; restart "
              f"{self._vital_restarts} of {self._max_node_restarts}, {restored}. Runners "
              "reconnect to it and start their episodes anew (those in progress are "
              f"lost); see {self._logs / 'learner.log'}", file=self._stream, flush=True)
        kwargs = {**node.kwargs,
                  "experiment": dataclasses.replace(experiment, resume=resume),
                  "restart": self._vital_restarts,
                  "addresses": {k: self.addresses[k] for k in node.publishes
                                if k in self.addresses}}
        return dataclasses.replace(node, kwargs=kwargs)

    def _write_pids(self) -> None:
        pids = {name: p.pid for name, p in self.processes.items()}
        storage.write_text(storage.join(self._run_dir, "nodes.json"), json.dumps(pids))

    def stop_all(self) -> None:
        """SIGTERM group by group (runners first, the replay last), then SIGKILL.

        Within `_STOP_TIMEOUT_S` in all. Every group but the last may use the time up to
        `_LAST_GROUP_S` before the deadline: the learner gets most of it, to finish its
        step and save its last checkpoint on a loaded machine, and the replay keeps its
        own seconds even after a node that ignores its SIGTERM (the learner, while its
        main thread is blocked in a Reverb call that only returns once the replay is
        gone; stopping the replay frees it). Every process is reaped before this returns,
        unless the kernel takes more than `_KILL_TIMEOUT_S` to tear a killed one down (seen
        on 2 cores beside two busy loops): the stop keeps its bound, and that process is
        past doing anything.
        """
        start = time.monotonic()
        deadline = start + _STOP_TIMEOUT_S
        groups = [[self.processes[n.name] for n in self._program.group(group)
                   if n.name in self.processes] for group in _STOP_ORDER]
        groups = [members for members in groups if members]
        exited_s: dict[str, float] = {}
        for i, members in enumerate(groups):
            for process in members:
                if process.exitcode is None:
                    process.terminate()
            last = i == len(groups) - 1
            learners = [p for p in members if p.name in self._learner_names()]
            # The look at whether a learner still computes takes the last second of the
            # learner's share, never the replay's.
            look_s = LOOK_S if learners and not last else 0.0
            _join_all(members, deadline if last else deadline - _LAST_GROUP_S - look_s)
            if look_s and any(p.exitcode is None for p in learners):
                waited = self._wait_for_busy_learners(learners)
                deadline = max(deadline, time.monotonic() + _LAST_GROUP_S) if waited else deadline
            exited_s.update({p.name: time.monotonic() - start for p in members
                             if p.exitcode is not None and p.name not in exited_s})
        _join_all(list(self.processes.values()), deadline)
        left = [p for p in self.processes.values() if p.exitcode is None]
        for process in left:
            process.kill()
        _join_all(left, time.monotonic() + _KILL_TIMEOUT_S)
        if left or max(exited_s.values(), default=0.0) > _SLOW_STOP_S:
            # Which node held the stop up, for the log of a run whose last save was cut.
            print("[local_mp] slow stop (seconds from the first SIGTERM to each exit): "
                  + ", ".join(f"{name} " + (f"{exited_s[name]:.1f}" if name in exited_s
                                            else "killed") for name in self.processes),
                  file=self._stream, flush=True)

    def _learner_names(self) -> set[str]:
        return {node.name for node in self._program.group("learner")}

    def _wait_for_busy_learners(self, learners: list[multiprocessing.process.BaseProcess]
                                ) -> bool:
        """Waits while a learner that has not exited is computing (finishing its step,
        saving its last checkpoint; `launch.backends.busy_learner`), up to `BUSY_LEARNER_S` or a
        second Ctrl-C; returns whether it waited."""
        busy = [p for p in learners if p.exitcode is None
                and computing(p.pid, p.join, lambda p=p: p.exitcode is None)]
        if not busy or self.hurry.is_set():
            return False
        print(f"[local_mp] {WAITING}", file=self._stream, flush=True)
        deadline = time.monotonic() + BUSY_LEARNER_S
        for process in busy:
            wait_while_computing(process.pid, process.join, lambda p=process: p.exitcode is None,
                                 deadline, self.hurry)
        return True


def _join_all(processes: list[multiprocessing.process.BaseProcess], deadline: float) -> None:
    """Joins `processes` until they have all exited or `deadline` (time.monotonic) passed."""
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0.0))


def run_local_mp(experiment: Experiment, stream: TextIO | None = None) -> RunResult:
    """Runs `experiment` as one process per node until its budget, target or time limit.

    Ctrl-C stops the program gracefully (within 10 s, or while a learner still computes
    its step and last save, up to 5 minutes) and re-raises KeyboardInterrupt; so do SIGINT
    and SIGTERM sent to this process alone (not to its nodes), even when it was started
    with SIGINT ignored (`nohup ... &`). A further signal while it stops only ends the wait
    for a computing learner.
    Raises ValueError before anything starts when the logdir's checkpoints and
    `experiment.resume` disagree. Checkpoints are the nodes' business: the learner node
    saves and restores the learner and the counts, the replay node the replay.
    """
    stream = stream or sys.stdout
    run_dir = experiment.logdir or f"runs/local_mp-{time.strftime('%Y%m%d-%H%M%S')}"
    experiment = _with_logdir(experiment, run_dir)
    experiment.check_checkpoints()
    require_central_inference(experiment)
    # A malformed SEED_AGENTS_MEMORY_PROFILE is refused here, not by a node as it starts.
    from seed_agents.utils.memory_profile import profile_setting

    profile_setting("learner")
    experiment.environment_spec()  # an action spec the agent cannot use fails here, first
    with hold_logdir(run_dir):  # held until the last node has stopped
        storage.makedirs(run_dir)
        write_run_record(experiment, stream)
        start_final_checkpoint(experiment)
        program = make_program(experiment)
        # A node's output goes to a local file (its file descriptors 1 and 2 point there);
        # for a logdir that is a URL the files are copied to <logdir>/logs as the run ends.
        logs = (Path(tempfile.mkdtemp(prefix="seed-agents-logs-")) if storage.is_url(run_dir)
                else Path(run_dir) / "logs")
        supervisor = _Supervisor(program, run_dir, logs,
                                 max_node_restarts=experiment.max_node_restarts, stream=stream)
        console = _Console(logs, stream)
        stop = threading.Event()
        handles_signals = threading.current_thread() is threading.main_thread()
        with contextlib.ExitStack() as cleanup:
            if handles_signals:
                # SIGINT and SIGTERM (Ctrl-C, a scheduler, `kill`) raise KeyboardInterrupt.
                # SIGINT too, not left to Python: a process started with SIGINT ignored (a
                # background job of a script, `nohup ... &`) gets no KeyboardInterrupt from
                # Python, and would go on training while its nodes, which do stop on SIGINT,
                # were still running.
                cleanup.callback(_set_handlers, _set_handlers(_raise_keyboard_interrupt))
            if storage.is_url(run_dir):
                cleanup.callback(storage.copy_tree, logs, storage.join(run_dir, "logs"))
            cleanup.callback(console.close)
            cleanup.callback(supervisor.stop_all)
            if handles_signals:
                # Runs first: a second Ctrl-C or SIGTERM must not cut the stopping short,
                # which would leave nodes running (and the interpreter's exit waiting for
                # them without a timeout); it only stops the wait for a computing learner.
                cleanup.callback(_set_handlers, lambda *_: supervisor.hurry.set())
            supervisor.start_all()
            supervisor.wait_for(("control",))
            result = limit_remote_program(
                experiment, lambda: supervisor.addresses["control"], run_dir, stream,
                restarts=lambda: sum(supervisor.restarts.values()),
                failure=supervisor.check, wait=stop.wait,
            )
        if "died" in result.stop_reason:
            raise NodeFailedError(result.stop_reason)
        return with_final_checkpoint(experiment, result)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _set_handlers(handlers: Any) -> dict[int, Any]:
    """Sets the handlers of SIGINT and SIGTERM (one for both, or a dict by signal) and
    returns the previous ones (SIG_DFL for a handler that was not set from Python)."""
    previous = {}
    for sig in _STOP_SIGNALS:
        handler = handlers[sig] if isinstance(handlers, dict) else handlers
        previous[sig] = signal.signal(sig, handler)
        if previous[sig] is None:
            previous[sig] = signal.SIG_DFL
    return previous


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _with_logdir(experiment: Experiment, logdir: str) -> Experiment:
    import dataclasses

    return dataclasses.replace(experiment, logdir=logdir)
