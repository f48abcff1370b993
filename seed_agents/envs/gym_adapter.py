"""Presents a `gymnasium.Env` as a `dm_env.Environment`.

Agents in this package speak dm_env because its `TimeStep` carries a per-step discount,
which is how termination (the future is worth nothing) and truncation (the episode was cut
short, the future still counts) stay apart. Gymnasium reports the same facts as two
booleans; this adapter turns them into discounts 0 and 1 and nothing else.
"""

from __future__ import annotations

from typing import Any

import dm_env
import gymnasium
import numpy as np
from dm_env import specs

# Shared, immutable numpy scalars: every step reuses them instead of allocating new ones.
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)

_REWARD_SPEC = specs.Array((), np.float32, name="reward")
_DISCOUNT_SPEC = specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


def _observation_spec(space: gymnasium.Space) -> specs.BoundedArray:
    if not isinstance(space, gymnasium.spaces.Box):
        raise TypeError(
            f"GymToDmEnv supports gymnasium.spaces.Box observations only, got {space!r}."
        )
    return specs.BoundedArray(
        space.shape, space.dtype, minimum=space.low, maximum=space.high, name="observation"
    )


def _action_spec(space: gymnasium.Space) -> specs.DiscreteArray:
    if not isinstance(space, gymnasium.spaces.Discrete):
        raise TypeError(
            f"GymToDmEnv supports gymnasium.spaces.Discrete actions only, got {space!r}."
        )
    return specs.DiscreteArray(int(space.n), dtype=np.int32, name="action")


class GymToDmEnv(dm_env.Environment):
    """A `dm_env.Environment` view of a gymnasium environment.

    Follows dm_env's auto-reset convention: `step` before the first `reset`, or after a
    LAST timestep, ignores its action and starts a new episode. A gymnasium `Discrete`
    space with a non-zero `start` is shifted so agents always see actions in `[0, n)`.

    Args:
      env: The gymnasium environment. The adapter owns it from now on: `close` closes it.
      seed: Passed to gymnasium's first `reset` only; later resets pass no seed so that
        episodes differ while the whole sequence stays reproducible.

    Raises:
      TypeError: If the observation space is not a `Box` or the action space is not
        `Discrete`, so that an unsupported environment fails at construction, not mid-run.
    """

    def __init__(self, env: gymnasium.Env, seed: int | None = None):
        self._env = env
        self._observation_spec = _observation_spec(env.observation_space)
        self._action_spec = _action_spec(env.action_space)
        self._observation_dtype = self._observation_spec.dtype
        self._action_start = int(env.action_space.start)
        self._seed = seed
        self._seed_used = False
        self._reset_next_step = True

    @property
    def gym_env(self) -> gymnasium.Env:
        """The wrapped gymnasium environment (e.g. for rendering)."""
        return self._env

    def reset(self) -> dm_env.TimeStep:
        if self._seed_used:
            observation, _ = self._env.reset()
        else:
            observation, _ = self._env.reset(seed=self._seed)
            self._seed_used = True
        self._reset_next_step = False
        return dm_env.restart(np.asarray(observation, dtype=self._observation_dtype))

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next_step:
            return self.reset()
        observation, reward, terminated, truncated, _ = self._env.step(
            int(action) + self._action_start
        )
        # `asarray` returns gym's own array when the dtype already matches: no copy.
        observation = np.asarray(observation, dtype=self._observation_dtype)
        reward = np.float32(reward)
        if terminated:
            # Checked before `truncated`: when both hold, the future is still worth nothing.
            self._reset_next_step = True
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, _ZERO, observation)
        if truncated:
            self._reset_next_step = True
            return dm_env.truncation(reward, observation, discount=_ONE)
        return dm_env.transition(reward, observation, discount=_ONE)

    def observation_spec(self) -> specs.BoundedArray:
        return self._observation_spec

    def action_spec(self) -> specs.DiscreteArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _REWARD_SPEC

    def discount_spec(self) -> specs.BoundedArray:
        return _DISCOUNT_SPEC

    def close(self) -> None:
        self._env.close()
