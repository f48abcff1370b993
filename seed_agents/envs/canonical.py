"""A user's environment as it is, converted once at the edge to the toolkit's dtypes.

The wire, the inference server and replay carry one dtype per kind of value
(`seed_agents.specs`): int32 discrete actions, float32 [-1, 1]^d continuous actions, float32
rewards and discounts, and observations of bool (object planes), uint8 (pixels, scaled where
read) or float32. Environments declare what is natural to them instead:
`DiscreteArray(dtype=int)` is int64, dm_control declares float64 actions and observations.
`canonical_environment` presents any such environment in the toolkit's dtypes, converting
each value once as it leaves or enters the environment, so nothing downstream converts (or
has to be told about) an environment's own dtypes.

A factory's environments also get dm_env's auto-reset convention, which the runners rely on
(after a LAST time step, `step` starts the next episode): many environments written for
one episode at a time (a loop that calls `reset` itself) do not implement it.

What is converted: any integer `DiscreteArray` (acted as int32 ids, sent back in the
environment's dtype); any float `BoundedArray` action vector (`CanonicalActions`); any
other numeric observation dtype (float64, float16, integers) to float32; rewards and
discounts to float32. What stays refused, with the spec in the message: actions of any other
kind, and observations that are not numeric arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from seed_agents.envs.action_scaling import CanonicalActions, is_canonical, needs_canonical_actions
from seed_agents.envs.wrapper import EnvironmentWrapper

OBSERVATION_DTYPES: tuple[np.dtype, ...] = (np.dtype(bool), np.dtype(np.uint8),
                                            np.dtype(np.float32))
"""Observation dtypes that cross the edge unchanged; other numeric ones become float32."""

_F32 = np.dtype(np.float32)
_INT32_MAX = int(np.iinfo(np.int32).max)


def canonical_environment(environment: dm_env.Environment) -> dm_env.Environment:
    """`environment`, wrapped where one of its specs is not in the toolkit's dtypes.

    Returns the environment itself when every spec already is (the built-in ids' are).

    Raises:
      ValueError: For an action spec that is neither an integer `DiscreteArray` nor a
        bounded float vector, or an observation spec that is not a numeric array; the
        message names the spec.
    """
    actions = environment.action_spec()
    if isinstance(actions, specs.DiscreteArray):
        if np.dtype(actions.dtype) != np.int32:
            environment = Int32Actions(environment)
    elif needs_canonical_actions(actions):
        if not is_canonical(actions):
            environment = CanonicalActions(environment)
    # Anything else reaches `check_action_spec`, which names what is wrong with it.
    if _needs_value_conversion(environment):
        environment = Float32Values(environment)
    return environment


class CanonicalFactory:
    """A picklable factory whose environments reset themselves after a LAST step
    (`AutoReset`) and pass through `canonical_environment`.

    Wraps a user's `seed -> dm_env.Environment` callable; pickles when the callable does.
    """

    def __init__(self, factory: Callable[[int], dm_env.Environment]):
        self.factory = factory

    def __call__(self, seed: int) -> dm_env.Environment:
        return canonical_environment(AutoReset(self.factory(seed)))

    def __repr__(self) -> str:
        return f"CanonicalFactory({self.factory!r})"


class AutoReset(EnvironmentWrapper):
    """dm_env's auto-reset convention for any environment: `step` after a LAST time step
    (or before any `reset`) returns the next episode's FIRST, from `reset`, ignoring the
    action. For an environment that already follows it, the same episodes."""

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        self._needs_reset = True

    def reset(self) -> dm_env.TimeStep:
        timestep = self._environment.reset()
        self._needs_reset = timestep.last()
        return timestep

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._needs_reset:
            return self.reset()
        timestep = self._environment.step(action)
        self._needs_reset = timestep.last()
        return timestep


class Int32Actions(EnvironmentWrapper):
    """Presents an integer `DiscreteArray` of any dtype as int32 action ids.

    `step(a)` sends `a` in the environment's own dtype; the ids are the same numbers.

    Raises:
      ValueError: If the action spec is not an integer `DiscreteArray` of 1 to 2^31 - 1
        values.
    """

    def __init__(self, environment: dm_env.Environment):
        inner = environment.action_spec()
        if (not isinstance(inner, specs.DiscreteArray)
                or np.dtype(inner.dtype).kind not in "iu"
                or not 1 <= int(inner.num_values) <= _INT32_MAX):
            raise ValueError(f"Int32Actions needs an integer DiscreteArray of 1 to "
                             f"{_INT32_MAX} values, got {inner!r}.")
        super().__init__(environment)
        self._inner_dtype = np.dtype(inner.dtype).type
        self._spec = specs.DiscreteArray(int(inner.num_values), dtype=np.int32,
                                         name=inner.name or "action")

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._environment.step(self._inner_dtype(action))

    def action_spec(self) -> specs.DiscreteArray:
        return self._spec


class Float32Values(EnvironmentWrapper):
    """Converts observations (numeric dtypes outside `OBSERVATION_DTYPES`) to float32,
    and rewards and discounts to float32, in specs and in every time step.

    Raises:
      ValueError: If the observation spec is not a single numeric array.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        observations = environment.observation_spec()
        if not _is_numeric_array(observations):
            raise ValueError(
                f"Observations must be one numeric array (bool, integer or float), got "
                f"{observations!r}: flatten a nested observation into one array first.")
        self._observation_dtype = None
        if np.dtype(observations.dtype) not in OBSERVATION_DTYPES:
            self._observation_dtype = _F32
            observations = _as_float32(observations, "observation")
        self._observation_spec = observations
        self._reward_spec = _as_float32(environment.reward_spec(), "reward")
        self._discount_spec = _as_float32(environment.discount_spec(), "discount")

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        observation = timestep.observation
        if self._observation_dtype is not None:
            observation = np.asarray(observation, self._observation_dtype)
        reward = None if timestep.reward is None else np.float32(timestep.reward)
        discount = None if timestep.discount is None else np.float32(timestep.discount)
        return timestep._replace(observation=observation, reward=reward, discount=discount)

    def reset(self) -> dm_env.TimeStep:
        return self._convert(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._convert(self._environment.step(action))

    def observation_spec(self) -> specs.Array:
        return self._observation_spec

    def reward_spec(self) -> specs.Array:
        return self._reward_spec

    def discount_spec(self) -> specs.Array:
        return self._discount_spec


def _is_numeric_array(spec: Any) -> bool:
    return (isinstance(spec, specs.Array)
            and np.dtype(spec.dtype).kind in "biuf")


def _needs_value_conversion(environment: dm_env.Environment) -> bool:
    observations = environment.observation_spec()
    if not _is_numeric_array(observations):
        return True  # Float32Values refuses it, naming the spec
    return (np.dtype(observations.dtype) not in OBSERVATION_DTYPES
            or np.dtype(environment.reward_spec().dtype) != _F32
            or np.dtype(environment.discount_spec().dtype) != _F32)


def _as_float32(spec: specs.Array, name: str) -> specs.Array:
    """`spec` with dtype float32 (bounds converted too); itself when it already is."""
    if np.dtype(spec.dtype) == _F32:
        return spec
    if isinstance(spec, specs.BoundedArray):
        with np.errstate(over="ignore"):  # a float64 bound beyond float32's is +-inf
            low = np.asarray(spec.minimum, np.float32)
            high = np.asarray(spec.maximum, np.float32)
        return specs.BoundedArray(spec.shape, np.float32, low, high, name=spec.name or name)
    return specs.Array(spec.shape, np.float32, name=spec.name or name)
