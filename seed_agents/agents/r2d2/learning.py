"""The R2D2 learner: prioritized sequences in, Q-network updates and new priorities out."""

from __future__ import annotations

from typing import Any

import numpy as np
import reverb
import tensorflow as tf
import tree

from seed_agents import core
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.r2d2.networks import RecurrentQNetwork
from seed_agents.learning.batches import Batches
from seed_agents.learning.optimizers import built
from seed_agents.losses.q_learning import n_step_double_q_targets
from seed_agents.networks.target_updates import update_target
from seed_agents.replay import unrolls
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger, NoOpLogger

_FIRST, _LAST = 0, 2


def _time_major(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


def sequence_priorities(td: tf.Tensor, mask: tf.Tensor, eta: float) -> tf.Tensor:
    """R2D2's priority of each sequence from its TD errors [T, B] (masked rows ignored):
    eta * max|td| + (1 - eta) * mean|td|; a mix, because the mean alone washes out the
    rare large errors worth replaying and the max alone overreacts to one outlier."""
    abs_td = tf.abs(td) * mask
    count = tf.maximum(tf.reduce_sum(mask, axis=0), 1.0)
    return eta * tf.reduce_max(abs_td, axis=0) + (1.0 - eta) * tf.reduce_sum(abs_td, 0) / count


class R2D2Learner(core.Learner):
    """Recurrent double Q-learning on prioritized sequences, with burn-in.

    Each step samples a batch of sequences, burns the LSTM state in from each sequence's
    stored start state over the first `burn_in` rows (no gradient), trains on the next
    `trace_length` rows against rescaled n-step double-Q targets from the target network,
    weights each sequence by its importance weight, and writes the sequences' new
    priorities back to the table (`mutate_priorities`). The target network copies the
    online one every `target_update_period` steps. The online network is the object the
    inference policy reads: an update is visible to acting at the next batch.
    """

    def __init__(
        self,
        network: RecurrentQNetwork,
        dataset: tf.data.Dataset,
        client: reverb.Client,
        table: str,
        config: R2D2Config,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ):
        self._network = network
        self._target_network = network.clone()
        self._batches = Batches(dataset, config.batch_size)
        self._client = client
        self._table = table
        self._config = config
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._optimizer = built(tf.keras.optimizers.Adam(
            config.learning_rate, epsilon=config.adam_epsilon
        ), network.trainable_variables)
        self._step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="learner_step")
        self._samples_per_step = config.batch_size * config.trace_length
        self._train = graph_function(self._train_step)
        self._update_target = graph_function(self._copy_to_target)

    @property
    def network(self) -> RecurrentQNetwork:
        return self._network

    @property
    def target_network(self) -> RecurrentQNetwork:
        return self._target_network

    @property
    def num_steps(self) -> int:
        return int(self._step_count.numpy())

    def _copy_to_target(self) -> None:
        update_target(self._target_network.variables, self._network.variables)

    def _loss(self, data: dict[str, Any], weights: tf.Tensor):
        c = self._config
        rows = {
            k: tree.map_structure(_time_major, v)
            for k, v in data.items()
            if k != unrolls.START_STATE
        }
        step_type = tf.cast(rows[unrolls.STEP_TYPE], tf.int32)
        first = step_type == _FIRST
        observation, prev_action = rows[unrolls.OBSERVATION], rows[unrolls.PREV_ACTION]
        online_state = target_state = tuple(data[unrolls.START_STATE])
        burn = c.burn_in
        if burn:
            _, online_state = self._network.unroll(
                observation[:burn], prev_action[:burn], first[:burn], online_state
            )
            online_state = tf.nest.map_structure(tf.stop_gradient, online_state)
            _, target_state = self._target_network.unroll(
                observation[:burn], prev_action[:burn], first[:burn], target_state
            )
        q_online, _ = self._network.unroll(
            observation[burn:], prev_action[burn:], first[burn:], online_state
        )
        q_target, _ = self._target_network.unroll(
            observation[burn:], prev_action[burn:], first[burn:], target_state
        )
        rewards = rows[unrolls.REWARD][burn:]
        if c.reward_clip is not None:
            rewards = tf.clip_by_value(rewards, -c.reward_clip, c.reward_clip)
        last = step_type[burn:] == _LAST
        targets = n_step_double_q_targets(
            q_online, q_target, rewards, c.discount * rows[unrolls.DISCOUNT][burn:], last,
            c.n_step, c.value_rescaling_epsilon,
        )
        actions = tf.cast(rows[unrolls.ACTION][burn:-1], tf.int32)
        q_taken = tf.gather(q_online[:-1], actions, batch_dims=2)
        td = targets - q_taken
        # A LAST row's action is never executed: nothing to learn there.
        mask = tf.cast(~last[:-1], tf.float32)
        count = tf.maximum(tf.reduce_sum(mask, axis=0), 1.0)
        sequence_loss = 0.5 * tf.reduce_sum(tf.square(td) * mask, axis=0) / count
        loss = tf.reduce_mean(weights * sequence_loss)
        metrics = {
            "loss": loss,
            "mean_abs_td": tf.reduce_sum(tf.abs(td) * mask) / tf.reduce_sum(count),
            "mean_q": tf.reduce_mean(q_taken),
        }
        return loss, sequence_priorities(td, mask, c.priority_eta), metrics

    def _train_step(self, data, probability, table_size):
        c = self._config
        # Importance weights (N P(i))^-beta, normalized by the batch maximum (Ape-X), so
        # they only ever scale updates down.
        weights = tf.pow(tf.cast(table_size, tf.float32) * tf.cast(probability, tf.float32),
                         -c.importance_sampling_exponent)
        weights /= tf.reduce_max(weights)
        with tf.GradientTape() as tape:
            loss, priorities, metrics = self._loss(data, weights)
        variables = self._network.trainable_variables
        gradients = tape.gradient(loss, variables)
        norm = tf.linalg.global_norm(gradients)
        if c.max_gradient_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, c.max_gradient_norm, use_norm=norm)
        self._optimizer.apply_gradients(zip(gradients, variables, strict=True))
        self._step_count.assign_add(1)
        metrics["gradient_norm"] = norm
        metrics["mean_priority"] = tf.reduce_mean(priorities)
        return priorities, metrics

    def close(self) -> None:
        self._batches.close()

    def step(self) -> dict[str, float]:
        sample = self._batches.next()
        if sample is None:  # No batch within the dataset's timeout: let the caller see
            return {}       # its stop event.
        info = sample.info
        priorities, metrics = self._train(sample.data, info.probability, info.table_size)
        self._client.mutate_priorities(
            self._table,
            updates=dict(zip(info.key.numpy().tolist(), priorities.numpy().tolist(),
                             strict=True)),
        )
        if self.num_steps % self._config.target_update_period == 0:
            self._update_target()
        metrics = {k: float(v) for k, v in metrics.items()}
        counts = self._counter.increment(
            learner_steps=1, learner_samples=self._samples_per_step
        )
        self._logger.write({**counts, **metrics})
        return metrics

    def get_variables(self, names=("policy",)) -> list[list[np.ndarray]]:
        return [[v.numpy() for v in self._network.variables] for _ in names]

    def checkpoint_objects(self) -> dict[str, Any]:
        """What a checkpoint must hold to continue: online and target networks, optimizer
        (its slots included) and the step count."""
        return {
            "network": self._network,
            "target_network": self._target_network,
            "optimizer": self._optimizer,
            "step": self._step_count,
        }
