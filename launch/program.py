"""A program: the nodes of a distributed agent and how they find each other.

Engine-agnostic, in the spirit of Launchpad: a `Program` lists `Node`s, each a module-level
function (so it pickles to any process or Ray actor) with its arguments. A node that
serves something *publishes* its address under a key ("replay", "inference", "control")
once it listens; a node that *needs* keys gets them as handles, which it dereferences
into real clients (a `reverb.Client`, an inference address, a control client) only where
it runs. Backends start nodes in program order, waiting for each node's needs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class ReplayHandle:
    """The Reverb server of a program."""

    address: str

    def dereference(self) -> Any:
        import reverb

        return reverb.Client(self.address)


@dataclasses.dataclass(frozen=True)
class InferenceHandle:
    """The learner's gRPC inference service; runners stream to `address`."""

    address: str

    def dereference(self) -> str:
        return self.address


@dataclasses.dataclass(frozen=True)
class ControlHandle:
    """The learner's control service: status counts and the policy's variables."""

    address: str

    def dereference(self) -> Any:
        from launch.control import ControlClient

        return ControlClient(self.address)


HANDLES = {"replay": ReplayHandle, "inference": InferenceHandle, "control": ControlHandle}


@dataclasses.dataclass
class NodeContext:
    """What a running node gets from its backend.

    Attributes:
      name: the node's name, unique in the program.
      handles: a handle for every key the node needs.
      bind_host: the host its servers bind ("127.0.0.1" on one machine; the node's IP on
        a cluster, so nodes on other machines reach it).
      stop_event: set by the backend when the node must stop; loops check it.
      publish: `publish(key, address)` once a server listens.
      logdir: the run directory for the node's own files (CSV logs), or None.
    """

    name: str
    handles: dict[str, Any]
    bind_host: str
    stop_event: threading.Event
    publish: Callable[[str, str], None]
    logdir: str | None = None


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


def make_handles(node: Node, addresses: dict[str, str]) -> dict[str, Any]:
    """The handles a node needs, from the addresses published so far."""
    return {key: HANDLES[key](addresses[key]) for key in node.needs}
