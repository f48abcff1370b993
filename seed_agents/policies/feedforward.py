"""The shell of the offline agents' policies: feed-forward, no extras, no state.

One `tf.function` call per batch on the learner's own network; `prev_action` is
ignored. A subclass defines `_act(observation) -> action` in TensorFlow, drawing any
randomness from `self._rng`.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import tensorflow as tf

from seed_agents.core import Policy
from seed_agents.policies.inputs import random_generator, step_signature, to_numpy
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.graph_functions import graph_function


class FeedForwardPolicy(Policy):
    """Subclasses set `self._network` before calling this `__init__`, and define `_act`."""

    _network: tf.Module

    def __init__(self, env_spec: EnvironmentSpec, seed: int | None = None):
        self._rng = random_generator(seed)
        self._action_dtype = tf.as_dtype(env_spec.actions.dtype)
        self.extras_spec: dict[str, Any] = {}
        self.state_spec = ()
        self._step = graph_function(self._tf_step, input_signature=step_signature(env_spec, ()))

    @abc.abstractmethod
    def _act(self, observation: tf.Tensor) -> tf.Tensor:
        """A batch of actions, [B] (discrete) or [B, d] in [-1, 1] (continuous)."""

    def _tf_step(self, observation, prev_action, state):
        del prev_action
        return tf.cast(self._act(observation), self._action_dtype), {}, state

    def export_step(self) -> tuple[Any, tuple[Any, ...]]:
        return self._tf_step, (self._network, self._rng)

    def initial_state(self, batch_size: int) -> Any:
        return ()

    def step(self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
             env_ids: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, Any], Any]:
        return to_numpy(self._step(observation, prev_action, state))
