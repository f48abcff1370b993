"""The D4PG learner: n-step transitions in, distributional critic and policy updated."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.d4pg.config import D4PGConfig
from seed_agents.agents.d4pg.networks import D4PGNetworks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.distributional import categorical_cross_entropy, categorical_projection
from seed_agents.networks.target_updates import update_target
from seed_agents.replay import transitions as tr
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class D4PGLearner(TransitionLearner):
    """Distributional DPG on a batch of transitions (o, a, R, D, o'), one `tf.function`.

    Per step:
      critic: cross-entropy between Z(o, a) and the projection of R + D Z'(o', pi'(o'))
              onto the support (targets from the target actor and critic; D holds
              gamma^n, and 0 at termination);
      actor:  ascends E[Z(o, pi(o))], the deterministic policy gradient through the
              online critic;
      targets: Polyak averaging with tau.
    """

    def __init__(
        self,
        networks: D4PGNetworks,
        dataset: tf.data.Dataset,
        config: D4PGConfig,
        counter: Counter | None = None,
        logger: Logger | None = None,
        samples_per_insert: SamplesPerInsert | None = None,
    ):
        super().__init__(networks, dataset, config.batch_size, counter, logger,
                         samples_per_insert)
        self._config = config
        self._actor_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                      networks.actor_variables)
        self._critic_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                       networks.critic_variables)
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation, action = data[tr.OBSERVATION], data[tr.ACTION]
        next_observation = data[tr.NEXT_OBSERVATION]
        reward = tf.cast(data[tr.REWARD], tf.float32)
        discount = tf.cast(data[tr.DISCOUNT], tf.float32)

        next_logits = nets.critic_logits(
            next_observation, nets.policy(next_observation, target=True), target=True)
        target = categorical_projection(tf.nn.softmax(next_logits), reward, discount,
                                        nets.support)
        with tf.GradientTape() as tape:
            logits = nets.critic_logits(observation, action)
            critic_loss = categorical_cross_entropy(target, logits)
        critic_norm = minimize(tape, critic_loss, nets.critic_variables,
                               self._critic_optimizer, c.max_gradient_norm)

        with tf.GradientTape() as tape:
            q = nets.q_value(nets.critic_logits(observation, nets.policy(observation)))
            actor_loss = -tf.reduce_mean(q)
        actor_norm = minimize(tape, actor_loss, nets.actor_variables,
                              self._actor_optimizer, c.max_gradient_norm)

        update_target(nets.target_variables, nets.online_variables, c.tau)
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "mean_q": tf.reduce_mean(nets.q_value(logits)),
            "critic_gradient_norm": critic_norm,
            "actor_gradient_norm": actor_norm,
        }

    def checkpoint_objects(self) -> dict[str, Any]:
        nets = self._networks
        return {
            "networks": nets,
            "critic_optimizer": self._critic_optimizer,
            "actor_optimizer": self._actor_optimizer,
            "step": self.step_variable,
        }
