"""What an agent needs to know about an environment before it sees one step."""

from __future__ import annotations

import dataclasses

import dm_env
from dm_env import specs


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """The shapes and dtypes of an environment's observations, actions, rewards, discounts."""

    observations: specs.Array
    actions: specs.Array
    rewards: specs.Array
    discounts: specs.BoundedArray

    @property
    def num_actions(self) -> int:
        """The number of discrete actions; raises for continuous action spaces."""
        if not isinstance(self.actions, specs.DiscreteArray):
            raise TypeError(f"Expected a discrete action spec, got {self.actions!r}.")
        return int(self.actions.num_values)


def make_environment_spec(environment: dm_env.Environment) -> EnvironmentSpec:
    """Reads the spec of a `dm_env.Environment`."""
    return EnvironmentSpec(
        observations=environment.observation_spec(),
        actions=environment.action_spec(),
        rewards=environment.reward_spec(),
        discounts=environment.discount_spec(),
    )
