"""A base for dm_env wrappers: everything passes through until a subclass says otherwise.

Wrappers here each change one thing (actions rescaled, observations flattened or masked);
without a base each would restate the four specs, reset, step and close. Attributes the
wrapper does not have (e.g. a gymnasium adapter's `gym_env`, a Control Suite task's
`physics`) are looked up on the wrapped environment, so code that renders or inspects an
environment works through any stack of wrappers.
"""

from __future__ import annotations

from typing import Any

import dm_env


class EnvironmentWrapper(dm_env.Environment):
    """Forwards every call to `environment`; override what the wrapper changes."""

    def __init__(self, environment: dm_env.Environment):
        self._environment = environment

    @property
    def environment(self) -> dm_env.Environment:
        """The wrapped environment."""
        return self._environment

    def reset(self) -> dm_env.TimeStep:
        return self._environment.reset()

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._environment.step(action)

    def observation_spec(self) -> Any:
        return self._environment.observation_spec()

    def action_spec(self) -> Any:
        return self._environment.action_spec()

    def reward_spec(self) -> Any:
        return self._environment.reward_spec()

    def discount_spec(self) -> Any:
        return self._environment.discount_spec()

    def close(self) -> None:
        self._environment.close()

    def __getattr__(self, name: str) -> Any:
        if name == "_environment":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._environment, name)
