"""Local inference (Acme/IMPALA style): an actor holds its own copy of the policy.

This is the baseline that central inference is measured against, and the simplest way to
act in one process. The actor's policy reads a private copy of the network, refreshed
from a `VariableSource` every `update_period` steps by a `VariableClient`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dm_env
import numpy as np
import tree
from dm_env import specs

from seed_agents import core
from seed_agents.replay import unrolls
from seed_agents.replay.adder import Adder


class VariableClient:
    """Copies a source's variables into local ones every `update_period` calls."""

    def __init__(
        self,
        source: core.VariableSource,
        variables: Sequence[Any],
        update_period: int = 1,
        name: str = "policy",
    ):
        if update_period < 1:
            raise ValueError(f"update_period must be >= 1, got {update_period}.")
        self._source = source
        self._variables = list(variables)
        self._period = update_period
        self._name = name
        self._calls = 0

    def update(self, wait: bool = False) -> None:
        """Counts a call; pulls on every `update_period`-th one, or now when `wait`."""
        self._calls += 1
        if wait or self._calls % self._period == 0:
            self.update_and_wait()

    def update_and_wait(self) -> None:
        (values,) = self._source.get_variables([self._name])
        for variable, value in zip(self._variables, values, strict=True):
            variable.assign(value)


class PolicyActor(core.Actor):
    """Acts in one environment with a batched `Policy` (batch of one).

    Rows go to an adder with a single slot, in the same layout the central inference
    server writes, so the same learner consumes both. `env_id` is the id the
    policy sees for this environment (see `Policy.step`); `action_spec` gives the
    actions' shape and dtype (default: discrete, int32).
    """

    def __init__(
        self,
        policy: core.Policy,
        adder: Adder | None = None,
        variable_client: VariableClient | None = None,
        env_id: int = 0,
        action_spec: specs.Array | None = None,
    ):
        self._policy = policy
        self._adder = adder
        self._client = variable_client
        self._state = policy.initial_state(1)
        self._initial_state = policy.initial_state(1)
        self._prev_action: np.ndarray | None = None
        self._pending: dm_env.TimeStep | None = None
        self._slot = np.zeros(1, np.int64)
        self._env_ids = np.array([env_id], np.int64)
        # "No action yet" (a FIRST step's previous action, a LAST row's dummy action):
        # zeros of the action's shape and dtype, as the inference server uses.
        shape, dtype = ((), np.int32) if action_spec is None else (
            tuple(action_spec.shape), np.dtype(action_spec.dtype))
        self._no_action = np.zeros((1, *shape), dtype)

    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        self._state = self._initial_state
        self._prev_action = None
        self._pending = timestep

    def select_action(self, observation: Any) -> np.ndarray:
        if self._pending is None:
            raise RuntimeError("Call observe_first before select_action.")
        prev = self._no_action if self._prev_action is None else self._prev_action
        state_in = self._state
        action, extras, self._state = self._policy.step(
            np.asarray(observation)[None], prev.astype(self._no_action.dtype, copy=False),
            state_in, self._env_ids,
        )
        self._add(self._pending, prev, action, extras, state_in)
        self._prev_action = action
        return action[0]

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        self._pending = next_timestep
        if next_timestep.last():
            # The LAST row is recorded with a dummy action: it is never executed, and the
            # learner masks the step that follows it.
            action = self._no_action
            extras = tree.map_structure(
                lambda s: np.zeros((1, *s.shape), s.dtype), self._policy.extras_spec
            )
            self._add(next_timestep, self._prev_action, action, extras, self._state)

    def _add(self, timestep, prev_action, action, extras, state_in) -> None:
        if self._adder is None:
            return
        reward = 0.0 if timestep.reward is None else timestep.reward
        discount = 1.0 if timestep.discount is None else timestep.discount
        rows = {
            unrolls.OBSERVATION: np.asarray(timestep.observation)[None],
            unrolls.PREV_ACTION: np.asarray(prev_action).reshape(self._no_action.shape),
            unrolls.REWARD: np.array([reward], np.float32),
            unrolls.DISCOUNT: np.array([discount], np.float32),
            unrolls.STEP_TYPE: np.array([timestep.step_type], np.uint8),
            unrolls.ACTION: np.asarray(action).reshape(self._no_action.shape),
            unrolls.EXTRAS: extras,
        }
        self._adder.add(self._slot, rows, state_in)

    def update(self, wait: bool = False) -> None:
        if self._client is not None:
            self._client.update(wait)


