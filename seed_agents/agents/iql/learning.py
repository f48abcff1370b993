"""The IQL learner: an expectile value, critics on it, advantage-weighted cloning."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.iql.config import IQLConfig
from seed_agents.agents.iql.networks import IQLNetworks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.deterministic import critic_regression
from seed_agents.losses.offline import (
    advantage_weights,
    expectile_loss,
    gaussian_log_likelihood,
)
from seed_agents.networks.actor_critic import follow
from seed_agents.replay import transitions as tr
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class IQLLearner(TransitionLearner):
    """Implicit Q-learning on a batch of the dataset's transitions (o, a, R, D, o').

    Per step, in the paper's order (each reads only the data's actions):
      value:   u = min_i Q'_i(o, a) - V(o); loss = mean |expectile - 1(u < 0)| u^2;
      policy:  w = min(exp(temperature (min_i Q'_i(o, a) - V(o))), max_weight);
               loss = -mean w log pi(a | o)   (the value just updated);
      critics: y = R + D V(o'); loss = sum_i mean (Q_i(o, a) - y)^2;
      targets: Q'_i <- tau Q_i + (1 - tau) Q'_i.
    """

    def __init__(self, networks: IQLNetworks, dataset: tf.data.Dataset, config: IQLConfig,
                 counter: Counter | None = None, logger: Logger | None = None):
        super().__init__(networks, dataset, config.batch_size, counter, logger)
        self._config = config
        lr = config.learning_rate
        self._value_optimizer = built(tf.keras.optimizers.Adam(lr), networks.value_variables)
        self._actor_optimizer = built(tf.keras.optimizers.Adam(lr), networks.actor.weights)
        self._critic_optimizer = built(tf.keras.optimizers.Adam(lr), networks.critics.weights)
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation, action = data[tr.OBSERVATION], tf.cast(data[tr.ACTION], tf.float32)
        reward = tf.cast(data[tr.REWARD], tf.float32)
        discount = tf.cast(data[tr.DISCOUNT], tf.float32)
        target_q = tf.stop_gradient(
            tf.reduce_min(tf.stack(nets.target_critics(observation, action)), axis=0))

        with tf.GradientTape() as tape:
            value = nets.value(observation)
            value_loss = expectile_loss(target_q - value, c.expectile)
        minimize(tape, value_loss, nets.value_variables, self._value_optimizer,
                 c.max_gradient_norm)

        weights = advantage_weights(target_q - nets.value(observation), c.temperature,
                                    c.max_weight)
        with tf.GradientTape() as tape:
            mean, stddev = nets.actor(observation)
            actor_loss = -tf.reduce_mean(weights * gaussian_log_likelihood(
                action, mean, tf.math.log(stddev)))
        minimize(tape, actor_loss, nets.actor.weights, self._actor_optimizer,
                 c.max_gradient_norm)

        target = tf.stop_gradient(reward + discount * nets.value(data[tr.NEXT_OBSERVATION]))
        with tf.GradientTape() as tape:
            q = nets.critics(observation, action)
            critic_loss = critic_regression(q, target)
        minimize(tape, critic_loss, nets.critics.weights, self._critic_optimizer,
                 c.max_gradient_norm)
        follow(nets.target_critics, nets.critics, c.tau)
        return {"value_loss": value_loss, "actor_loss": actor_loss,
                "critic_loss": critic_loss, "mean_v": tf.reduce_mean(value),
                "mean_weight": tf.reduce_mean(weights)}

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"networks": self._networks, "value_optimizer": self._value_optimizer,
                "actor_optimizer": self._actor_optimizer,
                "critic_optimizer": self._critic_optimizer, "step": self.step_variable}
