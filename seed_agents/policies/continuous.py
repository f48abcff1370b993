"""The shell of feed-forward policies with continuous actions (SAC, D4PG).

What they share: one `tf.function` call per batch on the learner's own variables, no
recurrent state, no extras, `prev_action` ignored, and a per-environment choice between
exploring and acting deterministically. Environments with ids below
`num_evaluation_envs` (all of them with `evaluation`) are evaluation environments, as in
SEED: they act deterministically (the policy's mean action) and the server keeps their
experience out of replay.
"""

from __future__ import annotations

import abc
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


class ContinuousPolicy(Policy):
    """Subclasses set `self._networks` and define `_act(observation, deterministic) ->
    action` in TensorFlow (`deterministic` is a [B] bool mask), drawing noise from
    `self._rng`."""

    def __init__(
        self,
        env_spec: EnvironmentSpec,
        num_evaluation_envs: int = 0,
        evaluation: bool = False,
        seed: int | None = None,
    ):
        self._evaluation = evaluation
        self.num_evaluation_envs = 0 if evaluation else num_evaluation_envs
        self._rng = random_generator(seed)
        self.extras_spec: dict[str, Any] = {}
        self.state_spec = ()
        signature = step_signature(env_spec, self.state_spec, tf.TensorSpec((None,), tf.bool))
        self._step = graph_function(self._tf_step, input_signature=signature)

    @abc.abstractmethod
    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        """Actions in [-1, 1]^d, [B, d]: the mean action where `deterministic`."""

    def acting_objects(self) -> tuple[Any, ...]:
        """What `_act` reads: the modules and variables an export carries. All of the
        networks by default; an agent whose policy reads only its actor returns that
        (critics and targets are most of an actor-critic's weights, and acting needs
        none of them)."""
        return (self._networks,)

    def _tf_step(self, observation, prev_action, state, deterministic):
        del prev_action
        return self._act(observation, deterministic), {}, state

    def export_step(self) -> tuple[Any, tuple[Any, ...]]:
        # The first training environment's step: sampling, unless this is an evaluation
        # policy (then every environment acts deterministically).
        def step(observation, prev_action, state):
            deterministic = tf.fill(tf.shape(observation)[:1], self._evaluation)
            return self._tf_step(observation, prev_action, state, deterministic)

        return step, (*self.acting_objects(), self._rng)

    def initial_state(self, batch_size: int) -> Any:
        return ()

    def step(
        self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
        env_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        deterministic = evaluation_mask(len(observation), env_ids, self.num_evaluation_envs,
                                        self._evaluation)
        return to_numpy(self._step(observation, prev_action, state, deterministic))
