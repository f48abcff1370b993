"""What an agent needs to know about an environment before it sees one step.

Two kinds of action spec travel through the toolkit (wire, server state, replay rows,
signatures), and nothing else:

* discrete: `specs.DiscreteArray` of int32, one action id per environment;
* continuous: `specs.BoundedArray` of float32 with shape (d,) and finite bounds. Agents see
  [-1, 1]^d: `seed_agents.envs.action_scaling.CanonicalActions` rescales to the
  environment's own bounds, in one place.

`make_environment_spec` refuses any other action spec, so an unsupported environment fails
before anything starts, with the spec in the message.
"""

from __future__ import annotations

import dataclasses

import dm_env
import numpy as np
from dm_env import specs


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """The shapes and dtypes of an environment's observations, actions, rewards, discounts."""

    observations: specs.Array
    actions: specs.Array
    rewards: specs.Array
    discounts: specs.BoundedArray

    @property
    def discrete_actions(self) -> bool:
        """Whether actions are discrete ids (else float32 vectors)."""
        return is_discrete(self.actions)

    @property
    def num_actions(self) -> int:
        """The number of discrete actions; raises for continuous action spaces."""
        if not is_discrete(self.actions):
            raise TypeError(f"Expected a discrete action spec, got {self.actions!r}.")
        return int(self.actions.num_values)

    @property
    def action_size(self) -> int:
        """d, the length of a continuous action; raises for discrete action spaces."""
        if is_discrete(self.actions):
            raise TypeError(f"Expected a continuous action spec, got {self.actions!r}.")
        return int(self.actions.shape[0])


def is_discrete(spec: specs.Array) -> bool:
    """Whether `spec` is a discrete action spec (a `DiscreteArray`)."""
    return isinstance(spec, specs.DiscreteArray)


def check_action_spec(spec: specs.Array) -> None:
    """Raises ValueError unless `spec` is one of the two supported action specs.

    Discrete: a `DiscreteArray` of int32 with at least one value. Continuous: a
    `BoundedArray` of float32, shape (d,) with d >= 1, finite bounds, minimum < maximum.
    """
    if isinstance(spec, specs.DiscreteArray):
        if np.dtype(spec.dtype) != np.int32 or spec.num_values < 1:
            raise ValueError(f"A discrete action spec must be int32 with num_values >= 1, "
                             f"got {spec!r}.")
        return
    problem = None
    if not isinstance(spec, specs.BoundedArray):
        problem = "it is neither a DiscreteArray nor a BoundedArray"
    elif np.dtype(spec.dtype) != np.float32:
        problem = f"its dtype is {np.dtype(spec.dtype)}, not float32"
    elif len(spec.shape) != 1 or spec.shape[0] < 1:
        problem = f"its shape is {spec.shape}, not (d,) with d >= 1"
    else:
        low = np.broadcast_to(spec.minimum, spec.shape)
        high = np.broadcast_to(spec.maximum, spec.shape)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            problem = "its bounds are not finite"
        elif not (low < high).all():
            problem = "its minimum is not below its maximum everywhere"
    if problem is not None:
        raise ValueError(
            f"Unsupported action spec {spec!r}: {problem}. Actions must be discrete "
            "(specs.DiscreteArray of int32) or a bounded float vector (specs.BoundedArray "
            "of float32, shape (d,), finite bounds).")


def make_environment_spec(environment: dm_env.Environment) -> EnvironmentSpec:
    """Reads the spec of a `dm_env.Environment`.

    Raises:
      ValueError: When its action spec is neither discrete nor a bounded float vector.
    """
    actions = environment.action_spec()
    check_action_spec(actions)
    return EnvironmentSpec(
        observations=environment.observation_spec(),
        actions=actions,
        rewards=environment.reward_spec(),
        discounts=environment.discount_spec(),
    )
