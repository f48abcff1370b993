"""A program: the nodes of a distributed agent and how they find each other.

Engine-agnostic, in the spirit of Launchpad: a `Program` lists `Node`s, each a module-level
function (so it pickles to any process or Ray actor) with its arguments. A node that
serves something *publishes* its address under a key ("replay", "inference", "control")
once it listens; a node that *needs* keys gets them as handles, which it dereferences
into real clients (a `reverb.Client`, an inference address, a control client) only where
it runs. Backends start nodes in program order, waiting for each node's needs.

As Launchpad's launch types do, a backend only decides where nodes run. When they all
run in one process (`inprocess`: `NodeContext.in_process`), a node publishes the object
itself beside (or instead of) an address, and a handle dereferences to that object: a
runner thread then calls the learner's inference server directly, with no network in
between, and a debugger steps from runner to policy to learner.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from seed_agents.utils import storage
from seed_agents.utils.startup import START_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class ReplayHandle:
    """The Reverb server of a program (a client of it, in any process)."""

    address: str | None
    local: Any = dataclasses.field(default=None, compare=False, repr=False)

    def dereference(self) -> Any:
        import reverb

        return reverb.Client(self.address)


@dataclasses.dataclass(frozen=True)
class InferenceHandle:
    """The learner's inference server: in its process the `InferenceServer` itself (call
    it directly), elsewhere the address of its gRPC service (runners stream to it)."""

    address: str | None
    local: Any = dataclasses.field(default=None, compare=False, repr=False)

    def dereference(self) -> Any:
        return self.local if self.local is not None else self.address


@dataclasses.dataclass(frozen=True)
class ControlHandle:
    """The learner's control: status counts and the policy's variables. In the learner's
    process the learner's own `LocalControl`, elsewhere a client of its control service
    (both have `status()`, `variables()` and `close()`)."""

    address: str | None
    local: Any = dataclasses.field(default=None, compare=False, repr=False)

    def dereference(self, **credentials: Any) -> Any:
        """The local control, or a `ControlClient` with `credentials` (`auth_token`,
        `tls`: see `launch.experiment.client_credentials`): a handle is an address and
        carries no secret."""
        if self.local is not None:
            return self.local
        from launch.control import ControlClient

        return ControlClient(self.address, **credentials)


HANDLES = {"replay": ReplayHandle, "inference": InferenceHandle, "control": ControlHandle}

NODE_START_TIMEOUT_S = START_TIMEOUT_S
"""How long a backend waits for a node to start (publish its address, answer once).

A node that dies while starting is reported at once, so this bounds only a node that
hangs or that a cluster cannot place (see `seed_agents.utils.startup`)."""


@dataclasses.dataclass
class NodeContext:
    """What a running node gets from its backend.

    Attributes:
      name: the node's name, unique in the program.
      handles: a handle for every key the node needs.
      bind_host: the host its servers bind ("127.0.0.1" on one machine; the node's IP on
        a cluster, so nodes on other machines reach it).
      stop_event: set by the backend when the node must stop; loops check it.
      publish: `publish(key, address, local=None)` once a server listens; `local` is the
        served object, for nodes in the same process (a remote backend drops it).
      logdir: the run directory for the node's own files (CSV logs), or None.
      in_process: the node shares its process with the backend and every other node: it
        may publish objects rather than start servers, and it leaves the process's
        settings (TensorFlow's threads) to the backend.
      stream: where the node prints its lines (None: standard output, which a remote
        backend sends to the node's log).
    """

    name: str
    handles: dict[str, Any]
    bind_host: str
    stop_event: threading.Event
    publish: Callable[..., None]
    logdir: str | None = None
    in_process: bool = False
    stream: TextIO | None = None

    @property
    def out(self) -> TextIO:
        """The stream the node prints to."""
        return self.stream if self.stream is not None else sys.stdout


@dataclasses.dataclass(frozen=True)
class Node:
    """One component of a program, run by `main(context, **kwargs)`.

    Attributes:
      group: "replay", "learner", "runner" or "evaluator" (backends treat groups alike:
        runners are restartable, the others are vital).
      publishes / needs: address keys this node serves / waits for.
      restartable: a crash is survived by restarting the node (runners).
      num_cpus, num_gpus: resources a cluster backend reserves for the node.
      resources: custom resources (name -> amount) it reserves too: they pin the node
        to the machines that offer them.
    """

    name: str
    group: str
    main: Callable[..., None]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    publishes: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    restartable: bool = False
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Program:
    """The nodes of an agent, in start order (servers before their clients)."""

    nodes: list[Node]

    def __post_init__(self):
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"Node names must be unique, got {names}.")
        published: set[str] = set()
        for node in self.nodes:
            missing = set(node.needs) - published
            if missing:
                raise ValueError(
                    f"Node {node.name!r} needs {sorted(missing)}, which no earlier node "
                    "publishes: order servers before their clients."
                )
            unknown = set(node.publishes) - set(HANDLES)
            if unknown:
                raise ValueError(f"Node {node.name!r} publishes unknown keys {unknown}.")
            published.update(node.publishes)

    def group(self, group: str) -> list[Node]:
        return [node for node in self.nodes if node.group == group]


def make_handles(node: Node, addresses: dict[str, str | None],
                 objects: dict[str, Any] | None = None) -> dict[str, Any]:
    """The handles a node needs, from the addresses (and, in process, the objects)
    published so far."""
    objects = objects or {}
    return {key: HANDLES[key](addresses.get(key), objects.get(key)) for key in node.needs}


def require_no_node_restarts(experiment: Any, backend: str) -> None:
    """Raises ValueError when `experiment` asks for learner restarts from a backend that
    has none (`local_mp` and `ray` restart their vital nodes; in process there is no
    other process to come back in)."""
    if experiment.max_node_restarts:
        raise ValueError(f"max_node_restarts (--max-node-restarts) is for the local_mp and "
                         f"ray backends; {backend} does not restart its learner.")


def restart_loss(logdir: str) -> tuple[bool, str]:
    """Whether a restarted learner has a checkpoint to resume from in `logdir`, and what
    its restart loses, in words: the learner step it comes back from and the logged
    learner steps after it (the learner's CSV log is ahead of its checkpoint)."""
    from seed_agents.utils.checkpointing import latest_checkpoint_info, learner_directory

    info = latest_checkpoint_info(learner_directory(logdir))
    if info is None:
        return False, "no checkpoint yet: it starts from scratch"
    last = _last_logged(os.path.join(logdir, "learner.csv"), "learner_steps")
    lost = "" if last is None else f"; {max(last - (info.step or 0), 0):,} logged steps lost"
    return True, f"from its checkpoint at learner step {info.step:,}{lost}"


def _last_logged(path: str, column: str) -> int | None:
    """`column` of the last row of the CSV log at `path` (None: no such row)."""
    try:
        with storage.open_file(path, "rb") as f:
            header = f.readline().decode().strip().split(",")
            if not storage.is_url(path):  # a URL's log is read whole
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - 65536, 0))
            rows = f.read().decode(errors="replace").strip().splitlines()
        return int(float(dict(zip(header, rows[-1].split(","), strict=True))[column]))
    except (OSError, IndexError, KeyError, ValueError):
        return None
