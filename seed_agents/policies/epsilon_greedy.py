"""Acting on Q-values: greedy, with a fraction epsilon of the actions uniform instead.

DQN's and discrete CQL's policy. Epsilon is a number, or a schedule of the run's env steps
(`LinearSchedule`): the inference server hands the policy the run's counts after every
batch (`Policy.observe_counts`), restored counts included, so a resumed run continues the
schedule where it was. Environments with ids below `num_evaluation_envs` (all of them with
`evaluation`) act greedily, and the server keeps their experience out of replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents.core import Policy
from seed_agents.policies.inputs import (
    evaluation_mask,
    random_generator,
    step_signature,
    to_numpy,
)
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.graph_functions import graph_function

Epsilon = float | Callable[[int], float]
"""A fixed epsilon, or a function of the run's env steps (e.g. `LinearSchedule`)."""


def _checked(epsilon: float) -> float:
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}.")
    return float(epsilon)


class EpsilonGreedyPolicy(Policy):
    """argmax_a Q(o, a) over `q_network(observation) -> [B, A]`, uniform with
    probability epsilon. No recurrent state, no extras; `prev_action` is ignored."""

    def __init__(
        self,
        q_network: Callable[[tf.Tensor], tf.Tensor],
        env_spec: EnvironmentSpec,
        epsilon: Epsilon = 0.0,
        num_evaluation_envs: int = 0,
        evaluation: bool = False,
        seed: int | None = None,
    ):
        if not env_spec.discrete_actions:
            raise ValueError("An epsilon-greedy policy acts on discrete actions; this "
                             f"environment's are {env_spec.actions!r}.")
        self._network = q_network
        self._num_actions = env_spec.num_actions
        self._schedule = None if evaluation or not callable(epsilon) else epsilon
        value = 0.0 if evaluation else _checked(epsilon(0) if callable(epsilon) else epsilon)
        # A variable, so a schedule moves it without retracing the step.
        self._epsilon = tf.Variable(value, dtype=tf.float32, trainable=False, name="epsilon")
        self._epsilon_now = value
        self._evaluation = evaluation
        self.num_evaluation_envs = 0 if evaluation else num_evaluation_envs
        self._rng = random_generator(seed)
        self._action_dtype = tf.as_dtype(env_spec.actions.dtype)
        self.extras_spec: dict[str, Any] = {}
        self.state_spec = ()
        signature = step_signature(env_spec, self.state_spec, tf.TensorSpec((None,), tf.bool))
        self._step = graph_function(self._tf_step, input_signature=signature)

    @property
    def epsilon(self) -> float:
        """The training environments' epsilon now."""
        return self._epsilon_now

    def observe_counts(self, counts: Mapping[str, int]) -> None:
        if self._schedule is None:
            return
        value = _checked(self._schedule(int(counts.get("env_steps", 0))))
        if value != self._epsilon_now:
            self._epsilon.assign(value)
            self._epsilon_now = value

    def _tf_step(self, observation, prev_action, state, greedy):
        del prev_action
        q = self._network(observation)
        action = tf.argmax(q, axis=-1, output_type=tf.int32)
        batch = tf.shape(q)[:1]
        explore = (self._rng.uniform(batch) < self._epsilon) & ~greedy
        uniform = self._rng.uniform(batch, 0, self._num_actions, dtype=tf.int32)
        return tf.cast(tf.where(explore, uniform, action), self._action_dtype), {}, state

    def export_step(self) -> tuple[Any, tuple[Any, ...]]:
        # The first training environment's step (greedy for an evaluation policy).
        def step(observation, prev_action, state):
            greedy = tf.fill(tf.shape(observation)[:1], self._evaluation)
            return self._tf_step(observation, prev_action, state, greedy)

        return step, (self._network, self._rng, self._epsilon)

    def initial_state(self, batch_size: int) -> Any:
        return ()

    def step(
        self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
        env_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        greedy = evaluation_mask(len(observation), env_ids, self.num_evaluation_envs,
                                 self._evaluation)
        return to_numpy(self._step(observation, prev_action, state, greedy))
