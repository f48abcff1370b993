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
    # float64 observations (MuJoCo's) become float32: half the bytes on the wire and in
    # replay, and what the networks compute in anyway.
    dtype = np.float32 if space.dtype == np.float64 else space.dtype
    return specs.BoundedArray(space.shape, dtype, minimum=space.low.astype(dtype),
                              maximum=space.high.astype(dtype), name="observation")


def _action_spec(space: gymnasium.Space) -> specs.DiscreteArray | specs.BoundedArray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return specs.DiscreteArray(int(space.n), dtype=np.int32, name="action")
    if isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 1 \
            and np.issubdtype(space.dtype, np.floating):
        return specs.BoundedArray(space.shape, space.dtype, minimum=space.low,
                                  maximum=space.high, name="action")
    raise TypeError(
        "GymToDmEnv supports gymnasium.spaces.Discrete and 1-D float Box actions, "
        f"got {space!r}."
    )


class GymToDmEnv(dm_env.Environment):
    """A `dm_env.Environment` view of a gymnasium environment.

    Follows dm_env's auto-reset convention: `step` before the first `reset`, or after a
    LAST timestep, ignores its action and starts a new episode. A gymnasium `Discrete`
    space with a non-zero `start` is shifted so agents always see actions in `[0, n)`. A
    1-D float `Box` action space becomes a `BoundedArray` with the same bounds (the
    `gym:` ids put `CanonicalActions` around it, so agents see [-1, 1]).

    Args:
      env: The gymnasium environment. The adapter owns it from now on: `close` closes it.
      seed: Passed to gymnasium's first `reset` only; later resets pass no seed so that
        episodes differ while the whole sequence stays reproducible.

    Raises:
      TypeError: If the observation space is not a `Box` or the action space is neither
        `Discrete` nor a 1-D float `Box`, so that an unsupported environment fails at
        construction, not mid-run.
    """

    def __init__(self, env: gymnasium.Env, seed: int | None = None):
        self._env = env
        self._observation_spec = _observation_spec(env.observation_space)
        self._action_spec = _action_spec(env.action_space)
        self._observation_dtype = self._observation_spec.dtype
        self._discrete = isinstance(self._action_spec, specs.DiscreteArray)
        self._action_start = int(env.action_space.start) if self._discrete else 0
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
        action = int(action) + self._action_start if self._discrete else action
        observation, reward, terminated, truncated, _ = self._env.step(action)
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

    def action_spec(self) -> specs.DiscreteArray | specs.BoundedArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _REWARD_SPEC

    def discount_spec(self) -> specs.BoundedArray:
        return _DISCOUNT_SPEC

    def close(self) -> None:
        self._env.close()
