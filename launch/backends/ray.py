"""The Ray backend: one Ray actor per node of the program, on one machine or a cluster.

The same program as `local_mp` (replay -> learner -> runners -> evaluator), the same step
limiter and the same `RunResult`; what changes is who places and restarts the nodes.

- Placement: each node is an actor reserving `node.num_cpus` CPUs and `node.num_gpus`
  GPUs (the learner asks for `experiment.learner_gpus`). Runners use the SPREAD strategy,
  so on a cluster they go to different machines; the other nodes use Ray's default. A
  node whose resources the cluster lacks waits for them, and the start fails clearly
  after `NODE_START_TIMEOUT_S` (600 s; a warning is printed up front when the cluster is
  too small).
- Addresses: servers bind the actor's node IP (`ray.util.get_node_ip_address()`), so
  nodes on other machines reach them. The driver itself reads the learner's control
  service over gRPC, so it must reach the cluster's node IPs too (also with `ray://`).
- Failures: runners are restartable actors (`max_restarts=-1`): Ray restarts a runner
  whose process dies, its `__init__` starts the node again, and the driver counts the
  restart when the runner's process changes (checked every 0.5 s: two restarts between
  checks count once). A runner whose `main` raises exits its process after 1 s so that
  Ray restarts it (Ray restarts only dead processes); unlike `local_mp` there is no
  exponential backoff, a new worker's start-up (seconds) throttles a crash loop. What a
  runner restart loses: its episodes in progress.
- Vital nodes (replay, learner, evaluator): one that dies or raises (its process, or its
  whole machine, as a preempted spot instance goes) stops the program with
  `NodeFailedError`, unless `experiment.max_node_restarts` allows a restart: then the
  driver stops every node (the survivors gracefully: a learner that survives saves a
  last checkpoint), waits (1 s, doubling per restart, at most 30 s) and starts the
  whole program again wherever Ray places it now, the learner and the replay from their
  newest checkpoints. Runners are new actors that stream to the new inference service
  with every episode anew; the driver follows the learner's control service to its new
  address. What the restart loses is printed (the learner's logged steps since its
  checkpoint, the replay's items since its checkpoint, every episode in progress). A
  restart that fails to start counts as another; past the bound, the run ends with the
  last error. The checkpoints must be where the new nodes run: a logdir on storage
  every machine mounts (one machine's disk is lost with it).
- Stopping (budget reached, Ctrl-C, an error): runners, evaluator, learner, then replay
  are asked to stop (10 s in all, the last 2 s kept for the replay), then every actor is
  killed without restart. As with `local_mp`, a learner still computing when its share
  runs out (its step in flight, then its last checkpoint: a minute's work for a large
  network on a slow CPU) is waited for, up to `BUSY_LEARNER_S`; the look at its process's
  CPU time is made by its own actor, on its own machine. Ctrl-C again ends the wait.
- Logs: each node writes its CSV files to `experiment.logdir`, made absolute; on a
  cluster each machine writes its own copy there (the directory must be writable on
  every machine). Ray forwards the nodes' console output to the driver, prefixed with the
  node's name and pid (Ray folds repeated lines; RAY_DEDUP_LOGS=0 keeps them all).
  `<logdir>/nodes.json` lists each node's pid and node IP, updated on restarts.
- Priority: a local Ray's workers run at the caller's niceness (Ray's own default nices
  them by 15, see `_LOCAL_WORKER_NICENESS`); a cluster's nodes at what `ray start` set.
- Checkpoints: the learner node writes `<logdir>/checkpoints/learner`, the replay node
  `<logdir>/checkpoints/replay`, each on its own machine; resuming on a cluster needs
  them where the new nodes run (the same machines, or a logdir on shared storage).
- Clusters: every machine needs this package and its dependencies installed (no code
  is shipped). Ray 2.60 turns token authentication on by default; a driver that joins a
  cluster by address needs `RAY_AUTH_MODE=token` and the cluster's token (`RAY_AUTH_TOKEN`
  or ~/.ray/auth_token) in its environment before Ray is imported, as every node does.
- Names: actors are named `f"{run_name}-{node.name}"` in the namespace `NAMESPACE`, so
  `ray.get_actor` finds them (run_name defaults to the logdir's name; two live runs on
  one cluster need different names); after the n-th restart of the program,
  `f"{run_name}-{node.name}-r{n}"` (a killed actor's name is freed asynchronously).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from launch.backends.busy_learner import (
    BUSY_LEARNER_S,
    LOOK_S,
    WAITING,
    computing,
    wait_while_computing,
)
from launch.backends.local_mp import NodeFailedError
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
from seed_agents.utils.logdir_lock import hold_logdir

NAMESPACE = "seed-agents"
_STOP_TIMEOUT_S = 10.0
_LAST_GROUP_S = 2.0  # of _STOP_TIMEOUT_S, kept for the last group to stop (the replay)
_HEALTH_EVERY_S = 0.5
_CRASH_EXIT_DELAY_S = 1.0
_STOP_ORDER = ("runner", "evaluator", "learner", "replay")
_MAX_BACKOFF_S = 30.0
# stop/info/published must answer while the node's main blocks in its own thread, and a
# stopping learner's computing/finish/hurry while its stop call is still in flight.
_MAX_CONCURRENCY = 6


class NodeActor:
    """Runs one node's `main` in a background thread of a Ray actor.

    `main` starts in `__init__`, so an actor that Ray restarts runs its node again by
    itself. The stop event, the published addresses and a crash's traceback live in the
    actor: a restart loses them (the addresses a runner needs stay in its arguments).
    """

    def __init__(self, node: Node, handles: dict[str, Any], logdir: str | None):
        import ray

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before a node imports TF
        self._node = node
        self._node_ip = ray.util.get_node_ip_address()
        self._lock = threading.Lock()
        self._published: dict[str, str] = {}
        self._error: str | None = None
        self._stop = threading.Event()
        self._hurry = threading.Event()  # ends `finish` early: Ctrl-C again at the driver
        context = NodeContext(
            name=node.name,
            handles=handles,
            bind_host=self._node_ip,
            stop_event=self._stop,
            publish=self._publish,
            logdir=logdir,
        )
        self._thread = threading.Thread(target=self._run, args=(context,), name=node.name,
                                        daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        # Ray prefixes the actor's forwarded output with this instead of the class name.
        node = getattr(self, "_node", None)
        return node.name if node is not None else "NodeActor"

    def _publish(self, key: str, address: str, local: Any = None) -> None:
        with self._lock:
            self._published[key] = address

    def _run(self, context: NodeContext) -> None:
        try:
            self._node.main(context, **self._node.kwargs)
            if not self._stop.is_set():
                raise RuntimeError(f"{self._node.name} returned before it was asked to stop")
        except BaseException:  # noqa: BLE001 - reported through info()
            self._error = traceback.format_exc()
            print(f"{self._node.name} failed:\n{self._error}", file=sys.stderr, flush=True)
            if self._node.restartable and not self._stop.wait(_CRASH_EXIT_DELAY_S):
                # Ray restarts an actor only when its process dies: die, to be restarted.
                os._exit(1)

    def published(self) -> dict[str, str]:
        """The addresses this node's servers listen on so far."""
        with self._lock:
            return dict(self._published)

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> bool:
        """Asks the node to stop; whether its main returned within `timeout_s`."""
        self._stop.set()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def computing(self, look_s: float = LOOK_S) -> bool:
        """Whether main still runs and this process used a fifth of a core or more over
        the next `look_s` (a stopping learner finishing its step or last save, not one
        blocked in a call to a peer that is gone)."""
        return computing(os.getpid(), self._thread.join, self._thread.is_alive, look_s)

    def finish(self, wait_s: float) -> bool:
        """Waits while main runs and this process keeps computing, up to `wait_s` or
        until `hurry`; whether main returned."""
        wait_while_computing(os.getpid(), self._thread.join, self._thread.is_alive,
                             time.monotonic() + wait_s, self._hurry)
        return not self._thread.is_alive()

    def hurry(self) -> None:
        """Ends a `finish` in progress (its caller stops the node some other way)."""
        self._hurry.set()

    def info(self) -> dict[str, Any]:
        """pid, node_ip, alive (main still running) and error (main's traceback, or None)."""
        return {"pid": os.getpid(), "node_ip": self._node_ip,
                "alive": self._thread.is_alive(), "error": self._error}


class _Calls:
    """At most one call in flight per actor and method, collected without blocking.

    A restarting or still-placed actor queues calls; resending every poll would pile
    them up, so a call is resent only once its previous one answered (or failed).
    """

    def __init__(self):
        self._inflight: dict[tuple[str, str], Any] = {}

    def poll(self, handles: dict[str, Any], method: str, timeout_s: float) -> dict[str, Any]:
        """Results (or Ray errors) of the calls that answered within `timeout_s`, by name."""
        import ray

        if not handles:
            return {}
        refs = {}
        for name, handle in handles.items():
            key = (name, method)
            if key not in self._inflight:
                self._inflight[key] = getattr(handle, method).remote()
            refs[name] = self._inflight[key]
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        ready_set = set(ready)
        results: dict[str, Any] = {}
        for name, ref in refs.items():
            if ref not in ready_set:
                continue
            del self._inflight[(name, method)]
            try:
                results[name] = ray.get(ref)
            except ray.exceptions.RayError as error:
                results[name] = error
        return results


class _Actors:
    """Starts the program's actors, watches them, counts restarts, restarts the program
    when a vital node dies (up to `experiment.max_node_restarts` times), stops them."""

    def __init__(self, experiment: Experiment, run_name: str, run_dir: str,
                 stream: TextIO):
        self._experiment = experiment
        self._program = make_program(experiment)
        self._run_name = run_name
        self._run_dir = run_dir
        self._stream = stream
        self.handles: dict[str, Any] = {}
        self.addresses: dict[str, str] = {}
        self.restarts = 0
        self.vital_restarts = 0
        self.failure: str | None = None
        self._calls = _Calls()
        self._identity: dict[str, tuple[str, int]] = {}
        self._next_check = 0.0

    @property
    def program(self) -> Program:
        return self._program

    def start_all(self) -> None:
        """Starts every node in program order and waits until each answers and the
        learner's control service is up."""
        import ray

        actor_class = ray.remote(NodeActor)
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        suffix = f"-r{self.vital_restarts}" if self.vital_restarts else ""
        for node in self._program.nodes:
            self._wait_for(node.needs, deadline)
            options: dict[str, Any] = {
                "name": f"{self._run_name}-{node.name}{suffix}",
                "namespace": NAMESPACE,
                "num_cpus": node.num_cpus,
                "num_gpus": node.num_gpus,
                "resources": dict(node.resources),
                "max_restarts": -1 if node.restartable else 0,
                "max_concurrency": _MAX_CONCURRENCY,
            }
            if node.group == "runner":
                options["scheduling_strategy"] = "SPREAD"
            try:
                self.handles[node.name] = actor_class.options(**options).remote(
                    node, make_handles(node, self.addresses), self._run_dir)
            except ValueError as error:  # Ray's answer to a taken actor name
                raise NodeFailedError(
                    f"Cannot create actor {options['name']!r} in namespace {NAMESPACE!r}: "
                    f"{error}; is another run with this name alive? Pass another run_name "
                    "or logdir."
                ) from error
        self._wait_started(deadline)
        # Without an evaluator nothing needed the control service to start.
        self._wait_for(("control",), deadline)

    def _wait_for(self, keys: tuple[str, ...], deadline: float) -> None:
        """Blocks until earlier actors published `keys`; raises if one fails or time's up."""
        while missing := set(keys) - set(self.addresses):
            publishers = {n.name: self.handles[n.name] for n in self._program.nodes
                          if n.name in self.handles and set(n.publishes) & missing}
            for name, result in self._calls.poll(publishers, "published", 0.5).items():
                if isinstance(result, Exception):
                    raise NodeFailedError(f"{name} died while starting: {result}")
                self.addresses.update(result)
            for name, info in self._calls.poll(publishers, "info", 0.0).items():
                if isinstance(info, Exception):
                    raise NodeFailedError(f"{name} died while starting: {info}")
                if info["error"]:
                    raise NodeFailedError(f"{name} failed while starting:\n{info['error']}")
            if time.monotonic() > deadline:
                raise NodeFailedError(
                    f"No node published {sorted(missing)} within {NODE_START_TIMEOUT_S:.0f} s. "
                    + _resource_hint(self._program)
                )

    def _wait_started(self, deadline: float) -> None:
        """Blocks until every actor answers once, so unplaceable nodes fail the start."""
        waiting = dict(self.handles)
        restartable = {node.name: node.restartable for node in self._program.nodes}
        while waiting:
            for name, info in self._calls.poll(waiting, "info", 0.5).items():
                if isinstance(info, Exception):
                    if restartable[name]:
                        continue  # Ray is restarting it: ask the new process
                    raise NodeFailedError(f"{name} died while starting: {info}")
                del waiting[name]
                self._identity[name] = (info["node_ip"], info["pid"])
            if waiting and time.monotonic() > deadline:
                raise NodeFailedError(
                    f"{sorted(waiting)} did not start within {NODE_START_TIMEOUT_S:.0f} s. "
                    + _resource_hint(self._program)
                )
        self._write_nodes()

    def check(self) -> str | None:
        """Why the program must stop, if a vital node died; counts runner restarts.

        Never blocks: it collects the `info` calls that answered since the last check.
        """
        now = time.monotonic()
        if now < self._next_check:
            return None
        self._next_check = now + _HEALTH_EVERY_S
        results = self._calls.poll(self.handles, "info", 0.0)
        changed = False
        for node in self._program.nodes:
            info = results.get(node.name)
            if info is None:
                continue
            if isinstance(info, Exception):
                if node.restartable:
                    continue  # Ray is restarting it; the new process is counted once it answers
                return self._vital_failure(f"{node.name} died: {_first_line(info)}")
            if info["error"] and not node.restartable:
                return self._vital_failure(f"{node.name} died: its main raised\n{info['error']}")
            identity = (info["node_ip"], info["pid"])
            previous = self._identity.get(node.name)
            if previous != identity:
                if previous is not None and node.restartable:
                    self.restarts += 1
                    self._stream.write(
                        f"[ray] {node.name} restarted by Ray on {identity[0]} (it ran on "
                        f"{previous[0]}, pid {previous[1]}); {self.restarts} restart(s) so far; "
                        "its environments start their episodes anew, the unrolls in "
                        "progress are dropped.\n")
                    self._stream.flush()
                self._identity[node.name] = identity
                changed = True
        if changed:
            self._write_nodes()
        return None

    def _vital_failure(self, reason: str) -> str | None:
        """Restarts the program after a vital node's death while `max_node_restarts`
        allows (blocking until it runs again); otherwise records and returns `reason`."""
        while self.vital_restarts < self._experiment.max_node_restarts:
            self.vital_restarts += 1
            self.restarts += 1
            try:
                self._restart(reason)
                return None
            except NodeFailedError as error:
                reason = str(error)
        self.failure = reason
        return reason

    def _restart(self, reason: str) -> None:
        """Stops every node and starts the program again from the newest checkpoints."""
        self.stop_all()
        resume, restored = restart_loss(self._run_dir)
        replay = ("the replay comes back from its newest checkpoint (items inserted after "
                  "it are lost)" if self._experiment.builder.checkpoint_replay
                  else "the replay starts empty")
        backoff_s = min(2.0 ** (self.vital_restarts - 1), _MAX_BACKOFF_S)
        self._stream.write(
            f"[ray] {reason.splitlines()[0]}; restart {self.vital_restarts} of "
            f"{self._experiment.max_node_restarts} in {backoff_s:g} s: every node starts "
            f"again where Ray places it, the learner {restored}, {replay}; runners start "
            "their episodes anew (those in progress are lost).\n")
        self._stream.flush()
        time.sleep(backoff_s)
        experiment = dataclasses.replace(self._experiment, resume=resume)
        program = make_program(experiment)
        self._program = Program([
            dataclasses.replace(node, kwargs={**node.kwargs, "restart": self.vital_restarts})
            if node.group == "learner" else node for node in program.nodes])
        self.handles, self.addresses, self._identity = {}, {}, {}
        self._calls = _Calls()
        self.start_all()

    def _write_nodes(self) -> None:
        nodes = {name: {"pid": pid, "node_ip": ip} for name, (ip, pid) in self._identity.items()}
        storage.write_text(storage.join(self._run_dir, "nodes.json"), json.dumps(nodes, indent=1))

    def stop_all(self) -> None:
        """Stops groups in order (`stop_in_order`), then kills every actor (no restart)."""
        import ray

        groups = [(group, [self.handles[n.name] for n in self._program.group(group)
                           if n.name in self.handles]) for group in _STOP_ORDER]
        stop_in_order([(group, handles) for group, handles in groups if handles],
                      self._stream)
        for handle in self.handles.values():
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)


def stop_in_order(groups: list[tuple[str, list[Any]]], stream: TextIO) -> None:
    """Asks each group's `NodeActor`s to stop, group after group, within `_STOP_TIMEOUT_S`
    in all; returns when they stopped or their time is up (the caller kills what is left).

    Every group but the last may use the time up to `_LAST_GROUP_S` before the deadline,
    so the replay keeps its seconds after a learner that does not stop. A learner whose
    main still runs when its share is up is asked whether it computes, and if so waited
    for (`_wait_for_busy_learners`); the replay then gets its `_LAST_GROUP_S` afresh.
    """
    import ray

    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for i, (group, handles) in enumerate(groups):
        last = i == len(groups) - 1
        learners = group == "learner" and not last
        # The look at whether a learner computes takes the last second of its own share.
        share_end = deadline if last else deadline - _LAST_GROUP_S - (LOOK_S if learners else 0)
        remaining = max(share_end - time.monotonic(), 0.0)
        refs = [handle.stop.remote(remaining) for handle in handles]
        # A dead or restarting actor answers with an error or not at all: both are fine,
        # the caller's kill ends it either way.
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=remaining)
        if not learners:
            continue
        running = [handle for handle, ref in zip(handles, refs, strict=True)
                   if ref not in ready or _answer(ref) is False]
        if running and _wait_for_busy_learners(running, stream):
            deadline = max(deadline, time.monotonic() + _LAST_GROUP_S)


def _answer(ref: Any) -> Any:
    """A ready call's value, or None where the actor failed (dead, restarting)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError:
        return None


def _wait_for_busy_learners(handles: list[Any], stream: TextIO) -> bool:
    """Waits while the learners of `handles` that compute go on computing, up to
    `BUSY_LEARNER_S`; Ctrl-C ends the wait (their actors are told to `hurry`, and the
    KeyboardInterrupt is not raised: the stop goes on). Returns whether it waited."""
    import ray

    looks = [handle.computing.remote(LOOK_S) for handle in handles]
    ready, _ = ray.wait(looks, num_returns=len(looks), timeout=LOOK_S + 5.0)
    busy = [handle for handle, look in zip(handles, looks, strict=True)
            if look in ready and _answer(look) is True]
    if not busy:
        return False
    finishing = [handle.finish.remote(BUSY_LEARNER_S) for handle in busy]
    end = time.monotonic() + BUSY_LEARNER_S + 5.0
    try:
        print(f"[ray] {WAITING}", file=stream, flush=True)  # a Ctrl-C from here on ends it
        # Short waits: a Ctrl-C is raised between them.
        while time.monotonic() < end and len(ray.wait(
                finishing, num_returns=len(finishing), timeout=0.5)[0]) < len(finishing):
            pass
    except KeyboardInterrupt:
        for handle in busy:
            handle.hurry.remote()
        ray.wait(finishing, num_returns=len(finishing), timeout=LOOK_S + 5.0)
    return True


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _program_resources(program: Program) -> tuple[float, float]:
    return (sum(n.num_cpus for n in program.nodes), sum(n.num_gpus for n in program.nodes))


def _resource_hint(program: Program) -> str:
    import ray

    cpus, gpus = _program_resources(program)
    return (f"The program reserves {cpus:g} CPUs and {gpus:g} GPUs; the cluster has "
            f"{ray.cluster_resources()} ({ray.available_resources()} free). A node that "
            "cannot be placed waits for resources.")


def _warn_if_too_small(program: Program, stream: TextIO) -> None:
    import ray

    cpus, gpus = _program_resources(program)
    total = ray.cluster_resources()
    if total.get("CPU", 0.0) < cpus or total.get("GPU", 0.0) < gpus:
        stream.write(f"warning: the program reserves {cpus:g} CPUs and {gpus:g} GPUs, the "
                     f"cluster has {total.get('CPU', 0.0):g} and {total.get('GPU', 0.0):g}: "
                     "some nodes wait for resources (an autoscaler may add them).\n")
        stream.flush()
    custom: dict[str, float] = {}
    for node in program.nodes:
        for name, amount in node.resources.items():
            custom[name] = custom.get(name, 0.0) + amount
    for name, amount in custom.items():
        if total.get(name, 0.0) < amount:
            stream.write(f"warning: the program reserves {amount:g} of the custom resource "
                         f"{name!r}, the cluster has {total.get(name, 0.0):g}: start a node "
                         f"with `ray start --resources='{{\"{name}\": {amount:g}}}'`.\n")
            stream.flush()


def _connect(cleanup: contextlib.ExitStack, program: Program, address: str | None,
             node_ip_address: str | None, num_cpus: int | None) -> None:
    """Starts, joins or reuses Ray; registers the matching shutdown or disconnect."""
    import ray

    if ray.is_initialized():
        return  # someone else's Ray: reuse it and leave it running
    kwargs: dict[str, Any] = {}
    if node_ip_address is not None:
        kwargs["_node_ip_address"] = node_ip_address
    if address is None:
        # "local" starts a new Ray even when /tmp/ray names a running cluster (plain
        # ray.init() would join that one). Logical CPUs are reservations, not cores: like
        # local_mp, a local Ray runs every node whatever the machine's core count.
        if num_cpus is None:
            num_cpus = max(os.cpu_count() or 1, math.ceil(_program_resources(program)[0]))
        _start_local_ray(num_cpus=num_cpus, **kwargs)
    else:
        if num_cpus is not None:
            raise ValueError("num_cpus sizes a local Ray; a cluster's nodes set their own "
                             "(ray start --num-cpus).")
        ray.init(address=address, **kwargs)
    # For a local Ray this shuts it down; for a cluster it only disconnects this driver.
    cleanup.callback(ray.shutdown)


_LOCAL_RAY_ATTEMPTS = 3

# Ray starts its workers at niceness 15 (its `worker_niceness`), which keeps its own
# control plane ahead of heavy tasks on a cluster's dedicated machines. A local Ray shares
# its machine with whatever else runs there: niced, the learner and the runners (all
# actors) yield nearly all of the CPU to any ordinary process (on 2 cores beside two busy
# loops, the test of a local Ray run took 416 s niced and 27 s not), while the same
# program on `local_mp` runs at the user's own priority. A local Ray's workers run at
# that priority too; RAY_worker_niceness in the environment still decides when set.
_LOCAL_WORKER_NICENESS = 0


@contextlib.contextmanager
def _worker_niceness(niceness: int) -> Iterator[None]:
    """Sets Ray's `worker_niceness` for the raylet started inside, unless the user set it.

    The raylet reads its settings from `RAY_*` variables when it starts and its workers
    inherit them; the variable is restored afterwards, so nothing else sees it.
    """
    name = "RAY_worker_niceness"
    if name in os.environ:
        yield
        return
    os.environ[name] = str(niceness)
    try:
        yield
    finally:
        os.environ.pop(name, None)


def _start_local_ray(**kwargs: Any) -> None:
    """Starts a local Ray, retrying a start-up that timed out.

    On a small busy machine Ray's own processes (GCS, raylet) sometimes miss Ray's
    start-up deadline, and `ray.init` gives up with nothing of ours running yet; a second
    attempt then starts normally. Other errors are not retried.
    """
    import ray

    for attempt in range(1, _LOCAL_RAY_ATTEMPTS + 1):
        before = _descendants(os.getpid())
        try:
            with _worker_niceness(_LOCAL_WORKER_NICENESS):
                ray.init(address="local", include_dashboard=False, **kwargs)
            return
        except Exception as error:  # noqa: BLE001 - Ray raises bare Exception here
            # The failed start's GCS and raylet are still running, and Ray no longer
            # knows them (its node object died with the error): stop them ourselves.
            ray.shutdown()
            for pid in _descendants(os.getpid()) - before:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if attempt == _LOCAL_RAY_ATTEMPTS or "timed out" not in str(error).lower():
                raise
            print(f"Local Ray start-up timed out (attempt {attempt} of {_LOCAL_RAY_ATTEMPTS}):"
                  f" {error}; retrying.", file=sys.stderr, flush=True)


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (Linux; elsewhere an empty set)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        for children in Path(f"/proc/{pending.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in map(int, children.read_text().split()):
                    if child not in found:
                        found.add(child)
                        pending.append(child)
    return found


def run_ray(
    experiment: Experiment,
    stream: TextIO | None = None,
    address: str | None = None,
    node_ip_address: str | None = None,
    num_cpus: int | None = None,
    run_name: str | None = None,
) -> RunResult:
    """Runs `experiment` as one Ray actor per node until its budget, target or time limit.

    Args:
      experiment: what to run; the same object runs under every backend.
      stream: where progress lines go (default stdout); node output is Ray's to forward.
      address: None starts a local Ray (shut down at the end); "auto", "host:port" or
        "ray://host:10001" joins a cluster (left running; this driver only disconnects).
        A Ray already initialized in this process is reused and left running (address,
        node_ip_address and num_cpus are then ignored).
      node_ip_address: the IP this driver's Ray node uses ("127.0.0.2" keeps a local Ray
        on loopback: Ray replaces 127.0.0.1 with the interface address).
      num_cpus: logical CPUs of a local Ray (default: at least what the program reserves).
      run_name: actor name prefix (default: the logdir's name).

    Blocks until done. Raises `NodeFailedError` when a vital node dies or a node cannot
    start; Ctrl-C stops every node (within about 10 s) and re-raises KeyboardInterrupt.
    Raises ValueError before anything starts when the logdir's checkpoints and
    `experiment.resume` disagree.
    """

    stream = stream or sys.stdout
    run_dir = experiment.logdir or f"runs/ray-{time.strftime('%Y%m%d-%H%M%S')}"
    if not storage.is_url(run_dir):
        run_dir = str(Path(run_dir).resolve())  # the same path on every machine
    experiment = dataclasses.replace(experiment, logdir=run_dir)
    experiment.check_checkpoints()
    require_central_inference(experiment)
    experiment.environment_spec()  # an action spec the agent cannot use fails here, first
    with hold_logdir(run_dir):  # held until every actor has stopped
        storage.makedirs(run_dir)
        write_run_record(experiment, stream)
        start_final_checkpoint(experiment)
        actors = _Actors(experiment, run_name or os.path.basename(run_dir.rstrip("/")), run_dir,
                         stream)
        stop = threading.Event()
        with contextlib.ExitStack() as cleanup:
            _connect(cleanup, actors.program, address, node_ip_address, num_cpus)
            _warn_if_too_small(actors.program, stream)
            cleanup.callback(actors.stop_all)
            actors.start_all()
            result = limit_remote_program(
                experiment, lambda: actors.addresses["control"], run_dir, stream,
                restarts=lambda: actors.restarts, failure=actors.check, wait=stop.wait,
            )
        if actors.failure:
            raise NodeFailedError(result.stop_reason)
        return with_final_checkpoint(experiment, result)
