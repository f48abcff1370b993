"""The discrete CQL learner: double-DQN n-step TD plus the conservative term."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.cql.config import CQLConfig
from seed_agents.agents.cql.networks import CQLNetworks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.q_learning import double_q_targets
from seed_agents.networks.target_updates import update_target
from seed_agents.replay import transitions as tr
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class CQLLearner(TransitionLearner):
    """One `tf.function` step per batch of transitions (o, a, R, D, o'):

      target: y = R + D Q'(o', argmax_a Q(o', a))     (double DQN; D holds gamma^n, and
                                                       0 at termination)
      loss:   mean huber(Q(o, a) - y) + alpha mean(logsumexp_b Q(o, b) - Q(o, a))
      every `target_update_period` steps: Q' <- Q.

    The conservative term lowers every action's value through the logsumexp and raises
    the data's: greedy actions stay where the data has evidence for them.
    """

    def __init__(self, networks: CQLNetworks, dataset: tf.data.Dataset, config: CQLConfig,
                 counter: Counter | None = None, logger: Logger | None = None):
        super().__init__(networks, dataset, config.batch_size, counter, logger)
        self._config = config
        self._optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                networks.q.trainable_variables)
        self._huber = tf.keras.losses.Huber(config.huber_delta, reduction="none")
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation, next_observation = data[tr.OBSERVATION], data[tr.NEXT_OBSERVATION]
        action = tf.cast(data[tr.ACTION], tf.int32)
        target = double_q_targets(data[tr.REWARD], data[tr.DISCOUNT],
                                  nets.q(next_observation), nets.target_q(next_observation))
        with tf.GradientTape() as tape:
            q = nets.q(observation)
            q_data = tf.gather(q, action, batch_dims=1)
            td_loss = tf.reduce_mean(self._huber(target[:, None], q_data[:, None]))
            gap = tf.reduce_mean(tf.reduce_logsumexp(q, axis=-1) - q_data)
            loss = td_loss + c.cql_alpha * gap
        norm = minimize(tape, loss, nets.q.trainable_variables, self._optimizer,
                        c.max_gradient_norm)

        def copy_to_target() -> tf.Tensor:
            update_target(nets.target_q.variables, nets.q.variables)
            return tf.constant(True)

        # After the step that completes each period, as DQN's example does.
        tf.cond(self.completes(c.target_update_period), copy_to_target,
                lambda: tf.constant(False))
        return {"loss": loss, "td_loss": td_loss, "cql_gap": gap,
                "mean_q": tf.reduce_mean(q_data), "gradient_norm": norm}

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"networks": self._networks, "optimizer": self._optimizer,
                "step": self.step_variable}
