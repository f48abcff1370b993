"""R2D2 acting: per-environment epsilon-greedy on the recurrent Q-network."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from dm_env import specs

from seed_agents.agents.r2d2.networks import RecurrentQNetwork
from seed_agents.core import Policy
from seed_agents.policies.inputs import (
    random_generator,
    step_signature,
    to_numpy,
    zero_state,
)
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.graph_functions import graph_function


def apex_epsilons(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X's exploration schedule: environment i of N gets base^(1 + alpha i/(N-1)).

    A few environments explore a lot (0.4 at i=0), most act nearly greedily (0.4^8 at
    i=N-1); the mix keeps the replay varied without one global schedule to tune.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
    if num_envs == 1:
        return np.array([base])
    return base ** (1.0 + alpha * np.arange(num_envs) / (num_envs - 1))


class R2D2Policy(Policy):
    """Batched epsilon-greedy policy over a `RecurrentQNetwork`, one `tf.function` call per
    batch, reading the network's variables in place (no parameter copies: SEED).

    Environment ids below `num_evaluation_envs` act with `eval_epsilon`; the other N ids
    follow `apex_epsilons(N)`. Ids past the end (more environments than announced) take
    the last, most greedy, epsilon. The Q-values go into `extras`: the server's adder
    computes each new sequence's initial priority from them.
    """

    def __init__(
        self,
        network: RecurrentQNetwork,
        env_spec: EnvironmentSpec,
        num_envs: int = 1,
        num_evaluation_envs: int = 0,
        eval_epsilon: float = 0.0,
        epsilon_base: float = 0.4,
        epsilon_alpha: float = 7.0,
        evaluation: bool = False,
        seed: int | None = None,
    ):
        if not evaluation and not 0 <= num_evaluation_envs < num_envs:
            raise ValueError(
                f"{num_evaluation_envs} evaluation environments leave none of the "
                f"{num_envs} environments to train on: set num_eval_envs below {num_envs} "
                "(e.g. --set num_eval_envs=0) or run more environments."
            )
        self._network = network
        self.num_evaluation_envs = 0 if evaluation else num_evaluation_envs
        if evaluation:
            self._epsilons = np.array([eval_epsilon], np.float32)
        else:
            self._epsilons = np.concatenate([
                np.full(num_evaluation_envs, eval_epsilon),
                apex_epsilons(num_envs - num_evaluation_envs, epsilon_base, epsilon_alpha),
            ]).astype(np.float32)
        self._rng = random_generator(seed)
        self._action_dtype = np.dtype(env_spec.actions.dtype)
        self.extras_spec = {"q_values": specs.Array((network.num_actions,), np.float32)}
        self.state_spec = network.state_spec
        signature = step_signature(env_spec, self.state_spec, tf.TensorSpec((None,), tf.float32))
        self._step = graph_function(self._tf_step, input_signature=signature)

    @property
    def epsilons(self) -> np.ndarray:
        """Epsilon by environment id."""
        return self._epsilons.copy()

    def _tf_step(self, observation, prev_action, state, epsilon):
        q_values, next_state = self._network(observation, prev_action, state)
        greedy = tf.argmax(q_values, axis=-1, output_type=tf.int32)
        batch = tf.shape(q_values)[0]
        random = self._rng.uniform([batch], 0, self._network.num_actions, dtype=tf.int32)
        explore = self._rng.uniform([batch]) < epsilon
        action = tf.where(explore, random, greedy)
        return tf.cast(action, self._action_dtype), {"q_values": q_values}, next_state

    def export_step(self) -> tuple[Any, tuple[Any, ...]]:
        epsilon = float(self._epsilons[min(self.num_evaluation_envs, len(self._epsilons) - 1)])

        def step(observation, prev_action, state):
            batch = tf.shape(observation)[:1]
            return self._tf_step(observation, prev_action, state, tf.fill(batch, epsilon))

        return step, (self._network, self._rng)

    def initial_state(self, batch_size: int) -> Any:
        return zero_state(self.state_spec, batch_size)

    def step(
        self, observation: np.ndarray, prev_action: np.ndarray, state: Any,
        env_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        if env_ids is None:
            env_ids = np.arange(len(observation))
        epsilon = self._epsilons[np.minimum(env_ids, len(self._epsilons) - 1)]
        return to_numpy(self._step(observation, prev_action, state, epsilon))
