"""The V-trace behaviour policy: sample from the policy logits, remember the logits."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from dm_env import specs

from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.core import Policy
from seed_agents.policies.inputs import (
    random_generator,
    step_signature,
    to_numpy,
    zero_state,
)
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.graph_functions import graph_function

POLICY_VERSION = "policy_version"
"""The extras key of the network version each action was taken with."""


class VTracePolicy(Policy):
    """Batched policy over a `PolicyValueNetwork`, as one `tf.function` call per batch.

    It reads the network's variables directly: when the network is the learner's, every
    batch acts with the newest parameters and nothing is copied (the SEED point). The
    behaviour logits go into `extras`, for the learner's importance weights, with the
    network's `version` (for the learner's policy-lag figure). `greedy`
    takes the most likely action instead of sampling (evaluation).
    """

    def __init__(
        self,
        network: PolicyValueNetwork,
        env_spec: EnvironmentSpec,
        greedy: bool = False,
        seed: int | None = None,
    ):
        self._network = network
        self._greedy = greedy
        self._rng = random_generator(seed)
        self._action_dtype = np.dtype(env_spec.actions.dtype)
        self.extras_spec = {"logits": specs.Array((network.num_actions,), np.float32),
                            POLICY_VERSION: specs.Array((), np.int64)}
        self.state_spec = network.state_spec
        signature = step_signature(env_spec, self.state_spec)
        self._step = graph_function(self._tf_step, input_signature=signature)

    def _tf_step(self, observation, prev_action, state):
        (logits, _), next_state = self._network(observation, prev_action, state)
        if self._greedy:
            action = tf.argmax(logits, axis=-1)
        else:
            # Gumbel-max sampling with our own generator: seeded, and no op-level seed state.
            uniform = self._rng.uniform(tf.shape(logits), minval=1e-20, maxval=1.0)
            action = tf.argmax(logits - tf.math.log(-tf.math.log(uniform)), axis=-1)
        version = tf.fill(tf.shape(action), self._network.version)
        extras = {"logits": logits, POLICY_VERSION: version}
        return tf.cast(action, self._action_dtype), extras, next_state

    def export_step(self) -> tuple[Any, tuple[Any, ...]]:
        return self._tf_step, (self._network, self._rng)

    def initial_state(self, batch_size: int) -> Any:
        return zero_state(self.state_spec, batch_size)

    def step(
        self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
        env_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        return to_numpy(self._step(observation, prev_action, state))
