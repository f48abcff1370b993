"""Policy-value networks for V-trace: an MLP torso, an optional LSTM core, two heads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from dm_env import specs

from seed_agents.agents.torsos import embed, make_torso, recurrent_unroll, torso_dtype


class PolicyValueNetwork(tf.Module):
    """obs -> (policy logits, state value), step by step or over a whole unroll.

    The torso is an MLP of `hidden_sizes`, behind convolutions when `torso` names a pixel
    torso; `precision="bfloat16"` computes it in bfloat16 and "auto" does where the
    hardware computes bfloat16 natively (see `torsos.PRECISIONS`).

    With `lstm_size`, an LSTM core sits between torso and heads and its input also gets the
    previous action (one-hot), as in IMPALA: memory then knows what the agent did. The
    feed-forward network ignores `prev_action` and its state is the empty tuple.

    Variables are created at construction (one call on zeros): the learner and the policy
    trace their `tf.function`s on different threads, and neither may be the one to create
    variables.

    `version` counts the learner steps these variables have had. It travels with them
    (checkpoints, the copies local actors and evaluators make), and the policy stamps it
    on every action it takes, so that the learner can log its policy lag: how many
    updates behind the learner the data it trains on was acted.
    """

    def __init__(
        self,
        num_actions: int,
        observation_shape: Sequence[int],
        hidden_sizes: Sequence[int] = (64, 64),
        lstm_size: int | None = None,
        separate_value_torso: bool = False,
        torso: str = "mlp",
        precision: str = "float32",
        name: str = "policy_value",
    ):
        super().__init__(name=name)
        self.num_actions = num_actions
        self.version = tf.Variable(0, dtype=tf.int64, trainable=False, name="version")
        self.lstm_size = lstm_size
        with self.name_scope:
            self._conv, self._torso = make_torso(torso, hidden_sizes, precision)
            dtype = torso_dtype(precision)
            # A value torso of its own keeps the value loss, whose scale grows with the
            # returns, from swamping the policy's features.
            self._value_torso = [
                tf.keras.layers.Dense(size, activation="relu", name=f"value_torso_{i}",
                                      dtype=dtype)
                for i, size in enumerate(
                    hidden_sizes if separate_value_torso and not lstm_size else ()
                )
            ]
            self._core = tf.keras.layers.LSTMCell(lstm_size, name="core") if lstm_size else None
            # Near-zero weights: the first policy is uniform whatever the torso's features.
            # With a default-scale head, a pixel torso's features made the first Pong policy
            # far from uniform (entropy 0.65 of 1.79), and the entropy bonus evened it out
            # by shrinking the features, first-layer ReLUs dying along the way.
            self._policy_head = tf.keras.layers.Dense(
                num_actions, name="policy",
                kernel_initializer=tf.keras.initializers.Orthogonal(gain=0.01))
            self._value_head = tf.keras.layers.Dense(1, name="value")
        self._observation_shape = tuple(observation_shape)
        self._features = int(np.prod(observation_shape))
        self(
            tf.zeros([1, *observation_shape]),
            tf.zeros([1], tf.int32),
            self.initial_state(1),
        )

    @property
    def state_spec(self) -> Any:
        if self._core is None:
            return ()
        return (specs.Array((self.lstm_size,), np.float32),) * 2

    def initial_state(self, batch_size: int) -> Any:
        if self._core is None:
            return ()
        zeros = tf.zeros([batch_size, self.lstm_size], tf.float32)
        return (zeros, zeros)

    def _embed(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Policy features and value features (the same tensor when the torso is shared)."""
        if not self._value_torso:
            x = embed(self._conv, observation, self._torso)
            return x, x
        flat = embed(self._conv, observation)
        return embed([], flat, self._torso), embed([], flat, self._value_torso)

    def _core_input(self, embedding: tf.Tensor, prev_action: tf.Tensor) -> tf.Tensor:
        one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.num_actions)
        return tf.concat([embedding, one_hot], axis=-1)

    def _heads(self, x: tf.Tensor, v: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self._policy_head(x), tf.squeeze(self._value_head(v), -1)

    def __call__(
        self, observation: tf.Tensor, prev_action: tf.Tensor, state: Any
    ) -> tuple[tuple[tf.Tensor, tf.Tensor], Any]:
        """One step for a batch: ((logits [B, A], value [B]), next state)."""
        x, v = self._embed(observation)
        if self._core is not None:
            x, state = self._core(self._core_input(x, prev_action), list(state))
            state, v = tuple(state), x
        return self._heads(x, v), state

    def unroll(
        self, observation: tf.Tensor, prev_action: tf.Tensor, first: tf.Tensor, state: Any
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """A whole time-major unroll [T, B, ...] -> (logits [T, B, A], values [T, B]).

        The recurrent state is reset to the initial state wherever `first` is true, exactly
        as the server does when it acts, so learner and actor see the same computation.
        """
        t, b = tf.shape(observation)[0], tf.shape(observation)[1]
        merged = tf.reshape(observation, tf.concat([[t * b], tf.shape(observation)[2:]], 0))
        x, v = self._embed(merged)
        x = tf.reshape(x, [t, b, x.shape[-1]])
        v = tf.reshape(v, [t, b, v.shape[-1]])
        if self._core is not None:
            x, _ = recurrent_unroll(
                self._core, self._core_input(x, prev_action), first, tuple(state)
            )
            v = x
        return self._heads(x, v)
