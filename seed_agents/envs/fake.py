"""A synthetic environment for tests and benchmarks.

It is cheap by construction (observations come from a small pool made once), can emulate
an expensive environment on request (`step_cost_us` burns CPU), and is learnable: the
rewarded action is a fixed function of the observation, so a working agent's return must
rise above chance. That makes it useful both for measuring throughput and for catching
an agent that runs fast but learns nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

# Large enough that consecutive observations look unrelated to an agent, small enough
# that even 84x84x4 float32 observations fit in a few MiB.
_POOL_SIZE = 64

_SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.uint8))

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)

_REWARD_SPEC = specs.Array((), np.float32, name="reward")
_DISCOUNT_SPEC = specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_shape(value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        shape = None
    if shape is None or not all(_is_int(d) for d in shape):
        raise ValueError(f"observation_shape must be a tuple of ints, got {value!r}.")
    if any(d < 1 for d in shape):
        # A zero-sized observation has no first element to derive the label from.
        raise ValueError(f"observation_shape dimensions must be >= 1, got {shape}.")
    return tuple(int(d) for d in shape)


def _check_dtype(value: Any) -> np.dtype:
    try:
        # `value is None` is rejected first: numpy reads `np.dtype(None)` as float64.
        dtype = None if value is None else np.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or dtype not in _SUPPORTED_DTYPES:
        valid = ", ".join(d.name for d in _SUPPORTED_DTYPES)
        raise ValueError(f"observation_dtype must be one of {valid}; got {value!r}.")
    return dtype


def _check_positive_int(name: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
        return int(value)

    return check


def _check_step_cost(value: Any) -> float:
    if (
        not isinstance(value, int | float | np.integer | np.floating)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"step_cost_us must be a finite number >= 0, got {value!r}.")
    return float(value)


def _check_terminate(value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"terminate must be a bool, got {value!r}.")
    return bool(value)


def _check_seed(value: Any) -> int | None:
    if value is not None and not _is_int(value):
        raise ValueError(f"seed must be an int or None, got {value!r}.")
    return None if value is None else int(value)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "observation_shape": _check_shape,
    "observation_dtype": _check_dtype,
    "num_actions": _check_positive_int("num_actions"),
    "episode_length": _check_positive_int("episode_length"),
    "step_cost_us": _check_step_cost,
    "terminate": _check_terminate,
    "seed": _check_seed,
}


def validate_fake_arguments(**kwargs: Any) -> dict[str, Any]:
    """Checks any subset of `FakeEnvironment`'s keyword arguments and normalises them.

    Separate from the constructor so the registry can reject a bad id when a factory is
    made, without paying for the observation pool. Takes a subset so the defaults live in
    one place only: the constructor's signature.

    Raises:
      ValueError: Naming the first bad or unknown argument.
    """
    normalised = {}
    for name, value in kwargs.items():
        check = _CHECKS.get(name)
        if check is None:
            raise ValueError(
                f"Unknown FakeEnvironment argument {name!r}; valid: {', '.join(_CHECKS)}."
            )
        normalised[name] = check(value)
    return normalised


class FakeEnvironment(dm_env.Environment):
    """A cheap, seeded, learnable `dm_env.Environment`.

    Observations cycle through a pool of `64` random arrays drawn once from
    `np.random.default_rng(seed)`; they are returned without copying and are read-only.
    Float observations lie in `[-1, 1]`, uint8 ones in `[0, 255]`.

    Reward is 1.0 when the action equals `label(observation)` and 0.0 otherwise, where the
    label depends only on the observation's first element:

    * uint8: `int(obs.flat[0]) % num_actions`;
    * float: the index of the equal-width bin of `[-1, 1)` holding `obs.flat[0]`, out of
      `num_actions` bins (with two actions: 0 if negative, 1 otherwise).

    Every episode lasts exactly `episode_length` steps. Its end is a termination
    (discount 0) if `terminate`, else a truncation (discount 1). `step` before the first
    `reset`, or after a LAST timestep, ignores its action and starts a new episode.

    Args:
      observation_shape: Shape of every observation.
      observation_dtype: `float32`, `float64` or `uint8`.
      num_actions: Size of the discrete action space.
      episode_length: Steps per episode (the reset does not count).
      step_cost_us: Microseconds of CPU to burn per `step`, to emulate a real environment.
        It busy-waits rather than sleeps, because a sleeping environment would free the
        CPU and flatter a benchmark.
      terminate: Whether episodes end by termination rather than truncation.
      seed: Seeds the observation pool; equal seeds give equal environments.
    """

    def __init__(
        self,
        *,
        observation_shape: tuple[int, ...] = (4,),
        observation_dtype: Any = np.float32,
        num_actions: int = 2,
        episode_length: int = 100,
        step_cost_us: float = 0.0,
        terminate: bool = False,
        seed: int | None = None,
    ):
        args = validate_fake_arguments(
            observation_shape=observation_shape,
            observation_dtype=observation_dtype,
            num_actions=num_actions,
            episode_length=episode_length,
            step_cost_us=step_cost_us,
            terminate=terminate,
            seed=seed,
        )
        shape, dtype = args["observation_shape"], args["observation_dtype"]
        self._num_actions = args["num_actions"]
        self._episode_length = args["episode_length"]
        self._step_cost_s = args["step_cost_us"] * 1e-6
        self._terminate = args["terminate"]

        rng = np.random.default_rng(args["seed"])
        if dtype == np.uint8:
            pool = rng.integers(0, 256, size=(_POOL_SIZE, *shape), dtype=np.uint8)
            minimum, maximum = 0, 255
        else:
            pool = rng.uniform(-1.0, 1.0, size=(_POOL_SIZE, *shape)).astype(dtype)
            minimum, maximum = -1.0, 1.0
        pool.setflags(write=False)
        self._pool = list(pool)
        self._labels = [self.label(obs) for obs in self._pool]

        self._observation_spec = specs.BoundedArray(
            shape, dtype, minimum, maximum, name="observation"
        )
        self._action_spec = specs.DiscreteArray(self._num_actions, dtype=np.int32, name="action")

        # The pool index keeps advancing across episodes, so each episode starts somewhere
        # new while the whole stream stays a function of the seed.
        self._index = -1
        self._episode_step = 0
        self._reset_next_step = True

    def label(self, observation: np.ndarray) -> int:
        """The rewarded action for `observation` (see the class docstring)."""
        observation = np.asarray(observation)
        first = observation.flat[0]
        if observation.dtype == np.uint8:
            return int(first) % self._num_actions
        bin_index = int((float(first) + 1.0) * 0.5 * self._num_actions)
        # Clamped because rounding to float32 can turn a draw just below 1.0 into 1.0.
        return min(max(bin_index, 0), self._num_actions - 1)

    def _next_observation(self) -> np.ndarray:
        self._index = (self._index + 1) % _POOL_SIZE
        return self._pool[self._index]

    def reset(self) -> dm_env.TimeStep:
        self._episode_step = 0
        self._reset_next_step = False
        return dm_env.restart(self._next_observation())

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next_step:
            return self.reset()
        if self._step_cost_s:
            deadline = time.perf_counter() + self._step_cost_s
            while time.perf_counter() < deadline:
                pass
        action = int(action)
        if not 0 <= action < self._num_actions:
            raise ValueError(f"Action {action} is outside [0, {self._num_actions}).")
        # The reward is for the observation the action was chosen from, not the next one.
        reward = _ONE if action == self._labels[self._index] else _ZERO
        observation = self._next_observation()
        self._episode_step += 1
        if self._episode_step < self._episode_length:
            return dm_env.transition(reward, observation, discount=_ONE)
        self._reset_next_step = True
        if self._terminate:
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, _ZERO, observation)
        return dm_env.truncation(reward, observation, discount=_ONE)

    def observation_spec(self) -> specs.BoundedArray:
        return self._observation_spec

    def action_spec(self) -> specs.DiscreteArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _REWARD_SPEC

    def discount_spec(self) -> specs.BoundedArray:
        return _DISCOUNT_SPEC
