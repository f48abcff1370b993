"""R2D2's recurrent Q-network: torso -> LSTM (with the previous action) -> dueling head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from dm_env import specs

from seed_agents.networks.torsos import embed, make_torso, recurrent_unroll


class RecurrentQNetwork(tf.Module):
    """obs -> Q-values for every action, step by step or over a whole sequence.

    The LSTM's input is the torso's features and the previous action (one-hot), so memory
    knows what the agent did. The dueling head (Wang et al. 2016) computes
    Q = V + A - mean(A) from two streams of `head_hidden_size` units (linear when 0).

    Variables are created at construction (one call on zeros): the learner and the policy
    trace their `tf.function`s on different threads, and neither may be the one to create
    variables.
    """

    def __init__(
        self,
        num_actions: int,
        observation_shape: Sequence[int],
        hidden_sizes: Sequence[int] = (64,),
        lstm_size: int = 64,
        head_hidden_size: int = 64,
        torso: str = "mlp",
        precision: str = "float32",
        name: str = "recurrent_q",
    ):
        super().__init__(name=name)
        self._arguments = dict(num_actions=num_actions, observation_shape=observation_shape,
                               hidden_sizes=hidden_sizes, lstm_size=lstm_size,
                               head_hidden_size=head_hidden_size, torso=torso,
                               precision=precision)
        self.num_actions = num_actions
        self.lstm_size = lstm_size
        with self.name_scope:
            self._conv, self._torso = make_torso(torso, hidden_sizes, precision)
            self._core = tf.keras.layers.LSTMCell(lstm_size, name="core")
            hidden = [head_hidden_size] if head_hidden_size else []
            self._value = [
                *(tf.keras.layers.Dense(h, activation="relu", name="value_hidden")
                  for h in hidden),
                tf.keras.layers.Dense(1, name="value"),
            ]
            self._advantage = [
                *(tf.keras.layers.Dense(h, activation="relu", name="advantage_hidden")
                  for h in hidden),
                tf.keras.layers.Dense(num_actions, name="advantage"),
            ]
        self(tf.zeros([1, *observation_shape]), tf.zeros([1], tf.int32), self.initial_state(1))

    def clone(self, name: str = "target_recurrent_q") -> RecurrentQNetwork:
        """A network of the same architecture holding a copy of these variables (the
        learner's target network)."""
        copy = RecurrentQNetwork(**self._arguments, name=name)
        for target, source in zip(copy.variables, self.variables, strict=True):
            target.assign(source)
        return copy

    @property
    def state_spec(self) -> tuple[specs.Array, specs.Array]:
        return (specs.Array((self.lstm_size,), np.float32),) * 2

    def initial_state(self, batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
        zeros = tf.zeros([batch_size, self.lstm_size], tf.float32)
        return (zeros, zeros)

    def _core_input(self, observation: tf.Tensor, prev_action: tf.Tensor) -> tf.Tensor:
        x = embed(self._conv, observation, self._torso)
        one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.num_actions)
        return tf.concat([x, one_hot], axis=-1)

    def _dueling(self, x: tf.Tensor) -> tf.Tensor:
        value, advantage = x, x
        for layer in self._value:
            value = layer(value)
        for layer in self._advantage:
            advantage = layer(advantage)
        return value + advantage - tf.reduce_mean(advantage, axis=-1, keepdims=True)

    def __call__(
        self, observation: tf.Tensor, prev_action: tf.Tensor, state: Any
    ) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """One step for a batch: (Q-values [B, A], next state)."""
        out, state = self._core(self._core_input(observation, prev_action), list(state))
        return self._dueling(out), tuple(state)

    def unroll(
        self, observation: tf.Tensor, prev_action: tf.Tensor, first: tf.Tensor, state: Any
    ) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """A time-major sequence [T, B, ...] -> (Q-values [T, B, A], state after it).

        The state resets wherever `first` is true, as the inference server resets it.
        """
        t, b = tf.shape(observation)[0], tf.shape(observation)[1]
        merged = tf.reshape(observation, tf.concat([[t * b], tf.shape(observation)[2:]], 0))
        merged_action = tf.reshape(prev_action, [t * b])
        x = self._core_input(merged, merged_action)
        x = tf.reshape(x, [t, b, x.shape[-1]])
        out, final = recurrent_unroll(self._core, x, first, tuple(state))
        q = self._dueling(tf.reshape(out, [t * b, self.lstm_size]))
        return tf.reshape(q, [t, b, self.num_actions]), final
