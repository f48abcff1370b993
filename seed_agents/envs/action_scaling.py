"""Continuous actions in [-1, 1], rescaled to an environment's own bounds in one place.

Agents with bounded continuous actions (SAC's tanh-Gaussian, D4PG's tanh policy) produce
actions in [-1, 1]^d whatever the task, as SEED RL and Acme do: the networks, exploration
noise and replay then never see an environment's units. `CanonicalActions` is the one
place that maps them back, affinely, to [minimum, maximum].

It is also the last gate before an environment: an action outside [-1, 1] is clipped and a
NaN entry becomes 0 (the middle of the range), and both are counted (`bad_actions`), so a
diverging policy is visible in the runner's figures instead of crashing a physics engine.
"""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from seed_agents.envs.wrapper import EnvironmentWrapper


def needs_canonical_actions(spec: specs.Array) -> bool:
    """Whether `spec` is a bounded float action vector (what `CanonicalActions` wraps)."""
    return (isinstance(spec, specs.BoundedArray) and not isinstance(spec, specs.DiscreteArray)
            and np.issubdtype(np.dtype(spec.dtype), np.floating))


def is_canonical(spec: specs.Array) -> bool:
    """Whether `spec` is float32 with bounds exactly [-1, 1] everywhere."""
    return (needs_canonical_actions(spec) and np.dtype(spec.dtype) == np.float32
            and bool(np.all(spec.minimum == -1.0)) and bool(np.all(spec.maximum == 1.0)))


class CanonicalActions(EnvironmentWrapper):
    """Presents an environment with bounded float actions as one with float32 [-1, 1]^d.

    `step(a)` sends `minimum + (a + 1) / 2 * (maximum - minimum)` in the inner action
    spec's dtype. `bad_actions` counts actions that had an entry outside [-1, 1] or a NaN
    (clipped, NaN set to 0) since construction.

    Raises:
      ValueError: If the inner action spec is not a bounded float vector with finite
        bounds, minimum < maximum.
    """

    def __init__(self, environment: dm_env.Environment):
        inner = environment.action_spec()
        if not needs_canonical_actions(inner) or len(inner.shape) != 1:
            raise ValueError(f"CanonicalActions needs a BoundedArray float action vector, "
                             f"got {inner!r}.")
        low = np.broadcast_to(np.asarray(inner.minimum, np.float64), inner.shape)
        high = np.broadcast_to(np.asarray(inner.maximum, np.float64), inner.shape)
        if not (np.isfinite(low).all() and np.isfinite(high).all() and (low < high).all()):
            raise ValueError(f"CanonicalActions needs finite bounds with minimum < maximum, "
                             f"got {inner!r}.")
        super().__init__(environment)
        self._inner_dtype = np.dtype(inner.dtype)
        self._offset = (high + low) / 2.0
        self._scale = (high - low) / 2.0
        self._spec = specs.BoundedArray(inner.shape, np.float32, -1.0, 1.0,
                                        name=inner.name or "action")
        self.bad_actions = 0

    def scale(self, action: Any) -> np.ndarray:
        """The inner environment's action for `action` in [-1, 1]^d (clipped, counted)."""
        action = np.asarray(action, np.float64).reshape(self._spec.shape)
        inside = (action >= -1.0) & (action <= 1.0)  # False for NaN too
        if not inside.all():
            self.bad_actions += 1
            action = np.clip(np.nan_to_num(action, nan=0.0), -1.0, 1.0)
        return (self._offset + self._scale * action).astype(self._inner_dtype)

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._environment.step(self.scale(action))

    def action_spec(self) -> specs.BoundedArray:
        return self._spec


def environment_action_spec(environment: dm_env.Environment) -> specs.BoundedArray | None:
    """The action spec under `environment`'s `CanonicalActions` (the bounds its [-1, 1]
    actions are rescaled to), or None when no wrapper in its chain rescales."""
    while environment is not None:
        if isinstance(environment, CanonicalActions):
            return environment.environment.action_spec()
        environment = environment.__dict__.get("_environment")
    return None
