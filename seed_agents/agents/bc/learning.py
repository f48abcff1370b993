"""The behaviour-cloning learner: maximum likelihood of the dataset's actions."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.bc.config import BCConfig
from seed_agents.agents.bc.networks import BCNetwork
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.offline import gaussian_log_likelihood
from seed_agents.replay import transitions as tr
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class BCLearner(TransitionLearner):
    """One `tf.function` step per batch of transitions (only o_t and a_t are read):

      discrete:   loss = mean cross-entropy(softmax(logits(o)), a)
      continuous: loss = -mean log N(a; mean(o), std(o)^2)
    """

    def __init__(self, network: BCNetwork, dataset: tf.data.Dataset, config: BCConfig,
                 counter: Counter | None = None, logger: Logger | None = None):
        super().__init__(network, dataset, config.batch_size, counter, logger)
        self._config = config
        self._optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                network.trainable_variables)
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        net = self._networks
        observation, action = data[tr.OBSERVATION], data[tr.ACTION]
        with tf.GradientTape() as tape:
            if net.discrete:
                logits = net.logits(observation)
                labels = tf.cast(action, tf.int32)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits))
                agreement = tf.reduce_mean(tf.cast(
                    tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32))
            else:
                mean, log_std = net.gaussian(observation)
                loss = -tf.reduce_mean(gaussian_log_likelihood(
                    tf.cast(action, tf.float32), mean, log_std))
                agreement = -tf.reduce_mean(tf.square(tf.clip_by_value(mean, -1.0, 1.0)
                                                      - tf.cast(action, tf.float32)))
        norm = minimize(tape, loss, net.trainable_variables, self._optimizer,
                        self._config.max_gradient_norm)
        # agreement: the share of greedy actions equal to the data's (discrete), or
        # minus the mean squared error of the mean action (continuous).
        return {"loss": loss, "agreement": agreement, "gradient_norm": norm}

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"networks": self._networks, "optimizer": self._optimizer,
                "step": self.step_variable}
