"""Holding each action for several environment steps (Acme's `ActionRepeatWrapper`).

The Control Suite's pixel benchmarks (PlaNet, CURL, DrQ) act every 2-8 physics control
steps; a step here is `repeats` steps of the wrapped environment with the same action. Its
reward is the discounted sum of theirs and its discount their product, so a return is the
same sum of rewards as without the wrapper and a terminal step inside the repeat ends the
agent's step (the rest of the repeats are not played). An agent's "env steps" with this
wrapper are `repeats` times fewer than the environment's: counters that compare against
published step budgets multiply back (`learn_continuous.py` does).
"""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

from seed_agents.envs.wrapper import EnvironmentWrapper


class ActionRepeat(EnvironmentWrapper):
    """Each `step` plays the action `repeats` times (fewer if the episode ends first)."""

    def __init__(self, environment: dm_env.Environment, repeats: int):
        if isinstance(repeats, bool) or not isinstance(repeats, int | np.integer) or repeats < 1:
            raise ValueError(f"ActionRepeat needs an integer repeats >= 1, got {repeats!r}.")
        super().__init__(environment)
        self._repeats = int(repeats)

    @property
    def repeats(self) -> int:
        """Environment steps per agent step."""
        return self._repeats

    def step(self, action: Any) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        if timestep.first():  # A step after the end is a reset: nothing to repeat.
            return timestep
        reward = timestep.reward
        discount = timestep.discount
        for _ in range(self._repeats - 1):
            if timestep.last():
                break
            timestep = self._environment.step(action)
            # The inner discount so far weights the later rewards; for the Control Suite
            # it is 1 until a terminal step, so this is the plain sum.
            reward = reward + discount * timestep.reward
            discount = discount * timestep.discount
        # Sums keep the wrapped environment's dtypes (float32 rewards stay float32).
        return timestep._replace(
            reward=np.asarray(reward, np.asarray(timestep.reward).dtype)[()],
            discount=np.asarray(discount, np.asarray(timestep.discount).dtype)[()])
