"""Policy-value networks for V-trace: an MLP torso, an optional LSTM core, two heads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from dm_env import specs

from seed_agents.networks.normalization import ObservationNormalizer
from seed_agents.networks.torsos import embed, make_torso, recurrent_unroll, torso_dtype


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

    With `observation_normalization` (vector observations), the network reads each
    observation standardized by running statistics that are variables of its own (see
    `ObservationNormalizer`): the learner updates them, and the policy, checkpoints and
    exports get them with the weights.

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
        observation_normalization: bool = False,
        observation_clip: float = 5.0,
        name: str = "policy_value",
    ):
        super().__init__(name=name)
        self.num_actions = num_actions
        self.version = tf.Variable(0, dtype=tf.int64, trainable=False, name="version")
        self.lstm_size = lstm_size
        with self.name_scope:
            self._observation_normalizer = (
                ObservationNormalizer(observation_shape, observation_clip)
                if observation_normalization else None)
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

    @property
    def observation_normalizer(self) -> ObservationNormalizer | None:
        return self._observation_normalizer

    def _embed(self, observation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Policy features and value features (the same tensor when the torso is shared)."""
        if self._observation_normalizer is not None:
            observation = self._observation_normalizer.normalize(observation)
        if not self._value_torso:
            x = embed(self._conv, observation, self._torso)
            return x, x
        flat = embed(self._conv, observation)
        return embed([], flat, self._torso), embed([], flat, self._value_torso)

    def _core_input(self, embedding: tf.Tensor, prev_action: tf.Tensor) -> tf.Tensor:
        one_hot = tf.one_hot(tf.cast(prev_action, tf.int32), self.num_actions)
        return tf.concat([embedding, one_hot], axis=-1)

    @property
    def torso_variables(self) -> list[tf.Variable]:
        """The trainable variables of the torso (convolutions, MLP layers and a value
        torso): what `VTraceConfig.torso_learning_rate_scale` steps at its own rate."""
        layers = [*self._conv, *self._torso, *self._value_torso]
        return [v for layer in layers for v in layer.trainable_variables]

    @property
    def value_head(self) -> tf.keras.layers.Dense:
        """The Dense(1) layer whose output is the value; PopArt rescales its weights."""
        return self._value_head

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
        logits, values, _ = self.unroll_with_features(observation, prev_action, first, state)
        return logits, values

    def unroll_with_features(
        self, observation: tf.Tensor, prev_action: tf.Tensor, first: tf.Tensor, state: Any
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """`unroll`, plus the features the policy head read: [T, B, F].

        The learner watches them (`feature_health`): a network whose features stop
        depending on the observation acts and values every state alike, and its losses
        alone do not show it.
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
        logits, values = self._heads(x, v)
        return logits, values, x


class ValueNormalizer(tf.Module):
    """Running statistics of the value targets, which a value head predicts normalized.

    The head outputs h; the value is `unnormalize(h) = mean + std * h`, and the head is
    trained on `normalize(target) = (target - mean) / std`, so the value loss is of order 1
    whatever the scale of the returns. `update` folds a batch of targets into `mean` and the
    second moment nu (std = sqrt(nu - mean^2)), with step size

        max(1 - decay, 1 / n)    for the n-th update

    i.e. the plain average of the first batches until 1 / n drops below 1 - decay, an
    exponential moving average after that. Why the warm-up: a moving average starts from
    its initial values (mean 0, std 1) and needs ~1 / (1 - decay) updates to forget them;
    with returns in the thousands the first hundred steps would train the head on targets
    of std ~1000 instead of 1. With the warm-up the first update takes the first batch's
    statistics exactly.

    Given the value head (`update(..., preserve=head)`: PopArt, "Preserving Outputs
    Precisely", van Hasselt et al. 2016), an update also rescales the head's kernel W and
    bias b so that every unnormalized output is unchanged:
    W' = W * std / std',  b' = (std * b + mean - mean') / std'. Without it ("running",
    rl_games' `normalize_value`) the head's outputs keep their numbers and mean other
    values until training catches up. The head is an argument, not an attribute, so that
    the normalizer's variables (and checkpoint) are its statistics only.

    The std is clipped to [1e-4, 1e6] (the PopArt paper's bounds): constant targets would
    otherwise make it 0 and `normalize` divide by it. The statistics are float64 variables:
    nu - mean^2 cancels catastrophically in float32 when the returns' mean is large
    against their spread (mean 1e4, std 1: nu = 1e8 + 1 has no 1 in float32).
    """

    STD_BOUNDS = (1e-4, 1e6)

    def __init__(self, decay: float, name: str = "value_normalizer"):
        super().__init__(name=name)
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}.")
        self._decay = decay
        with self.name_scope:
            self.first_moment = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                            name="first_moment")
            self.second_moment = tf.Variable(1.0, dtype=tf.float64, trainable=False,
                                             name="second_moment")
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")

    def _std(self) -> tf.Tensor:
        variance = self.second_moment - tf.square(self.first_moment)
        low, high = self.STD_BOUNDS
        return tf.clip_by_value(tf.sqrt(tf.maximum(variance, 0.0)), low, high)

    @property
    def mean(self) -> tf.Tensor:
        return tf.cast(self.first_moment, tf.float32)

    @property
    def std(self) -> tf.Tensor:
        return tf.cast(self._std(), tf.float32)

    def normalize(self, x: tf.Tensor) -> tf.Tensor:
        return (x - self.mean) / self.std

    def unnormalize(self, x: tf.Tensor) -> tf.Tensor:
        return self.mean + self.std * x

    def update(self, targets: tf.Tensor, mask: tf.Tensor | None = None,
               preserve: tf.keras.layers.Dense | None = None) -> None:
        """Folds the targets on the rows `mask` keeps into the statistics (see above).

        `preserve`: the value head whose unnormalized outputs the update must not change
        (PopArt); None leaves the head alone. A batch without a valid row changes
        nothing, not even the update count.
        """
        targets = tf.cast(tf.stop_gradient(targets), tf.float64)
        if mask is None:
            mask = tf.ones_like(targets)
        mask = tf.cast(mask, tf.float64)
        valid = tf.reduce_sum(mask)
        rows = tf.maximum(valid, 1.0)
        batch_mean = tf.reduce_sum(mask * targets) / rows
        batch_second_moment = tf.reduce_sum(mask * tf.square(targets)) / rows
        has_rows = tf.cast(valid > 0, tf.float64)
        count = self.updates + tf.cast(has_rows, tf.int64)
        step = has_rows * tf.maximum(tf.constant(1.0 - self._decay, tf.float64),
                                     1.0 / tf.cast(tf.maximum(count, 1), tf.float64))
        old_mean, old_std = tf.identity(self.first_moment), self._std()
        self.first_moment.assign_add(step * (batch_mean - old_mean))
        self.second_moment.assign_add(step * (batch_second_moment - self.second_moment))
        self.updates.assign(count)
        if preserve is not None:
            self._preserve_outputs(preserve, old_mean, old_std)

    def _preserve_outputs(self, head: tf.keras.layers.Dense, old_mean: tf.Tensor,
                          old_std: tf.Tensor) -> None:
        new_mean, new_std = self.first_moment, self._std()
        kernel, bias = head.kernel, head.bias
        kernel.assign(kernel * tf.cast(old_std / new_std, kernel.dtype))
        bias.assign(tf.cast((old_std * tf.cast(bias, tf.float64) + old_mean - new_mean)
                            / new_std, bias.dtype))
