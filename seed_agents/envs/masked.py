"""Hides chosen entries of an environment's observations, to make it partially observable.

CartPole with its two velocities zeroed (`mask:1,3:gym:CartPole-v1`) can be balanced only
by an agent that remembers past positions: a small, fast check that a recurrent agent's
memory works, which the fully observed task cannot give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from seed_agents.envs.wrapper import EnvironmentWrapper


def parse_mask_id(rest: str) -> tuple[tuple[int, ...], str]:
    """Splits the part of an id after `mask:`, e.g. `"1,3:gym:CartPole-v1"`.

    Returns:
      The flat indices to zero and the inner environment's id. Whether the indices fit the
      observation is known only once the inner environment exists.

    Raises:
      ValueError: If the indices are not non-negative ints or the inner id is missing.
    """
    usage = "expected 'mask:<flat indices>:<environment id>', e.g. 'mask:1,3:gym:CartPole-v1'"
    indices_text, _, inner_id = rest.partition(":")
    parts = [p.strip() for p in indices_text.split(",")]
    if not inner_id or not all(p.isdigit() for p in parts):
        raise ValueError(f"Bad id 'mask:{rest}': {usage}.")
    return tuple(int(p) for p in parts), inner_id


def _with_zero_in_bounds(spec: specs.Array, indices: np.ndarray) -> specs.Array:
    """`spec`, its bounds widened where a masked entry's range excludes 0, else itself."""
    if not isinstance(spec, specs.BoundedArray):
        return spec
    minimum = np.broadcast_to(spec.minimum, spec.shape).reshape(-1)
    maximum = np.broadcast_to(spec.maximum, spec.shape).reshape(-1)
    if np.all(minimum[indices] <= 0) and np.all(maximum[indices] >= 0):
        return spec
    minimum, maximum = minimum.copy(), maximum.copy()
    minimum[indices] = np.minimum(minimum[indices], 0)
    maximum[indices] = np.maximum(maximum[indices], 0)
    return specs.BoundedArray(
        spec.shape,
        spec.dtype,
        minimum.reshape(spec.shape),
        maximum.reshape(spec.shape),
        name=spec.name,
    )


class MaskedObservation(EnvironmentWrapper):
    """Zeroes fixed entries (flat indices) of another environment's array observations.

    Each observation is a copy: the inner environment may keep or reuse the array it
    returns (FakeEnvironment's are read-only views of a pool, a gym wrapper may remember
    the last one), so zeroing it in place could change the inner environment's state. On
    the small vector observations this is meant for, the whole wrapper costs ~1.5 us a step
    (CartPole: ~106K -> ~90K steps/s). The specs are the inner environment's, except that
    bounds are widened to include 0 where a masked entry's range did not.

    Args:
      env: The inner environment; `close` closes it.
      indices: Flat (C-order) indices into the observation; duplicates are harmless.

    Raises:
      ValueError: If there are no indices or one is outside the observation, naming its
        shape.
    """

    def __init__(self, env: dm_env.Environment, indices: Sequence[int]):
        spec = env.observation_spec()
        if not isinstance(spec, specs.Array):
            raise TypeError(f"MaskedObservation needs an array observation, got {spec!r}.")
        flat = np.asarray(indices)
        if flat.ndim != 1 or flat.size == 0 or flat.dtype.kind not in "iu":
            raise ValueError(f"indices must be a non-empty sequence of ints, got {indices!r}.")
        size = int(np.prod(spec.shape))
        if np.any(flat < 0) or np.any(flat >= size):
            raise ValueError(
                f"Mask indices {list(flat)} must lie in [0, {size}) for observations of shape "
                f"{spec.shape} (indices are into the flattened observation)."
            )
        super().__init__(env)
        self._drop = np.zeros(spec.shape, bool)
        self._drop.reshape(-1)[flat] = True
        self._observation_spec = _with_zero_in_bounds(spec, flat)

    @property
    def inner(self) -> dm_env.Environment:
        """The wrapped environment."""
        return self._environment

    def _mask(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        observation = np.array(timestep.observation)  # The one copy.
        # Assigned rather than multiplied by a 0/1 mask, which would turn inf into NaN.
        np.putmask(observation, self._drop, 0)
        return timestep._replace(observation=observation)

    def reset(self) -> dm_env.TimeStep:
        return self._mask(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._mask(self._environment.step(action))

    def observation_spec(self) -> specs.Array:
        return self._observation_spec
