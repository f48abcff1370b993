"""The whole conceptual API: five small interfaces.

An actor's call order within an episode is::

    observe_first(timestep) -> [select_action(obs) -> observe(action, next_timestep)]* -> update()

A `Policy` is the batched, stateful function that both a local actor and the central
inference server call. A learner is a `VariableSource` (others read its weights), a
`Worker` (it runs) and a `Saveable` (it checkpoints). Nothing here imports a deep-learning
framework.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dm_env
import numpy as np


class Actor(abc.ABC):
    """Interacts with an environment: picks actions and records what it saw."""

    @abc.abstractmethod
    def select_action(self, observation: Any) -> np.ndarray:
        """Returns an action for `observation`."""

    @abc.abstractmethod
    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        """Records the FIRST timestep of an episode."""

    @abc.abstractmethod
    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        """Records the action taken and the timestep it led to."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Refreshes the actor's parameters from its variable source, if it has one."""


class Policy(abc.ABC):
    """Maps a batch of observations to actions, carrying per-environment state.

    Everything is numpy with a leading batch axis. `prev_action` is the action each
    environment took before this observation (0 at the FIRST step of an episode); the
    caller keeps it, as it keeps `state`, and resets both at FIRST steps. `extras` are
    stored beside the action in the unroll (e.g. the behaviour logits V-trace needs).

    `env_ids` name the environments of the batch (the server's slots, 0..N-1), so a policy
    can act differently per environment (R2D2's per-environment epsilon). Environments with
    ids below `num_evaluation_envs` are evaluation environments, as in SEED: the policy
    acts greedily there, and the server keeps their experience out of replay and their
    returns in statistics of their own.
    """

    extras_spec: dict[str, Any]
    state_spec: Any
    num_evaluation_envs: int = 0

    @abc.abstractmethod
    def initial_state(self, batch_size: int) -> Any:
        """The state of `batch_size` environments at the start of an episode."""

    @abc.abstractmethod
    def step(
        self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
        env_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        """Returns (action, extras, next_state) for a batch; `env_ids` default to 0..B-1."""

    def observe_counts(self, counts: Mapping[str, Any]) -> None:
        """The run's counts (`env_steps`, restored ones included) after each batch the
        inference server served: a policy that follows the run's progress (an epsilon
        schedule of env steps) reads them here, so a resumed run continues it. The
        default ignores them; it runs on the server's thread, so keep it cheap."""
        del counts

    def export_step(self) -> tuple[Callable[..., Any], Sequence[Any]]:
        """What `seed-agents export` saves: the step of the policy's first training
        environment (id `num_evaluation_envs`) as a traceable function of framework
        tensors, `(observation, prev_action, state) -> (action, extras, next_state)`
        over a batch, and the framework objects it reads (networks, random generators),
        which the exported model carries. The default raises: such a policy cannot be
        exported."""
        raise NotImplementedError(
            f"{type(self).__name__} does not say how to export it: give it an "
            "`export_step()` (see seed_agents.core.Policy).")


class VariableSource(abc.ABC):
    """Something that holds named variables other components read."""

    @abc.abstractmethod
    def get_variables(self, names: Sequence[str]) -> list[Any]:
        """Returns the current values of the named variable collections, in order."""


class Worker(abc.ABC):
    """A component with a run loop."""

    @abc.abstractmethod
    def run(self) -> None:
        """Runs until stopped."""


class Saveable(abc.ABC):
    """A component whose state can be saved and restored."""

    @abc.abstractmethod
    def save(self) -> Any:
        """Returns the state to save."""

    @abc.abstractmethod
    def restore(self, state: Any) -> None:
        """Restores a state returned by `save`."""


class Learner(VariableSource, Worker, Saveable):
    """Updates parameters from experience.

    `run` calls `step` until `stop_event` is set or `num_steps` steps are done; a caller
    that wants to stop a learner from another thread sets the event (no signals).
    """

    @abc.abstractmethod
    def step(self) -> dict[str, float]:
        """Performs one update and returns its metrics."""

    def close(self) -> None:
        """Releases what the learner holds open on the replay (its dataset's streams),
        once it has stopped and while the replay is still up. Default: nothing."""

    def run(self, num_steps: int | None = None, stop_event: threading.Event | None = None) -> None:
        stop_event = stop_event or threading.Event()
        done = 0
        while not stop_event.is_set() and (num_steps is None or done < num_steps):
            self.step()
            done += 1

    def checkpoint_objects(self) -> dict[str, Any]:
        """The learner's whole state as named TensorFlow trackables, for checkpoints.

        Everything needed to continue training after a restart: the networks (or their
        variables), the optimizer (slots and iteration count), the learner's step count
        under "step" as an int64 `tf.Variable`, and whatever else the agent keeps (a
        target network, ...). The names are the checkpoint's keys, so keep them stable;
        "counts" is taken (the run's counts go beside). The objects are the learner's
        own, not copies: `utils.checkpointing.Checkpointer` saves and restores them in
        place, between steps, in the thread that steps the learner.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support checkpointing yet.")

    def save(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not support checkpointing yet.")

    def restore(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support checkpointing yet.")
