"""Small deterministic policies for tests: real `Policy` implementations in numpy."""

from __future__ import annotations

import numpy as np
from dm_env import specs

from seed_agents.core import Policy


class CountingPolicy(Policy):
    """Acts `observation[0] > 0`; its state counts the steps since the episode began.

    The count makes state handling visible: the server must reset it at FIRST steps and
    store the count fed in at each unroll's row 0 as the start state.
    """

    def __init__(self, num_actions: int = 2):
        self.num_actions = num_actions
        self.extras_spec = {"logits": specs.Array((num_actions,), np.float32)}
        self.state_spec = (specs.Array((1,), np.float32),)
        self.calls = 0
        self.batch_sizes: list[int] = []

    def initial_state(self, batch_size: int):
        return (np.zeros((batch_size, 1), np.float32),)

    def step(self, observation, prev_action, state, env_ids=None):
        self.calls += 1
        self.batch_sizes.append(len(observation))
        action = (observation.reshape(len(observation), -1)[:, 0] > 0).astype(np.int32)
        logits = np.zeros((len(observation), self.num_actions), np.float32)
        logits[np.arange(len(action)), action] = prev_action.astype(np.float32)
        return action, {"logits": logits}, (state[0] + 1.0,)
