"""The SAC learner: n-step transitions in, policy, critics and temperature updated."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.sac.networks import SACNetworks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.networks.target_updates import update_target
from seed_agents.policies.inputs import random_generator
from seed_agents.replay import transitions as tr
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class SACLearner(TransitionLearner):
    """Soft actor-critic on a batch of transitions (o, a, R, D, o'), one `tf.function`.

    Per step, in order:
      critics:     y = scale R + D (min_i Q'_i(o', a') - alpha log pi(a'|o')), a' ~ pi(o');
                   loss = sum_i mean (Q_i(o, a) - y)^2 (D already holds gamma^n and 0
                   at termination: see `seed_agents.replay.transitions`);
      actor:       loss = mean (alpha log pi(a~|o) - min_i Q_i(o, a~)), a~ ~ pi(o)
                   (reparameterized: gradients flow through the sample into the actor);
      temperature: loss = -mean log(alpha) (log pi(a~|o) + target_entropy), pushing the
                   policy's entropy towards the target;
      targets:     Q'_i <- tau Q_i + (1 - tau) Q'_i.
    The networks are the ones the inference policy reads: acting sees each update at once.
    """

    def __init__(
        self,
        networks: SACNetworks,
        dataset: tf.data.Dataset,
        config: SACConfig,
        counter: Counter | None = None,
        logger: Logger | None = None,
        samples_per_insert: SamplesPerInsert | None = None,
        seed: int | None = None,
    ):
        super().__init__(networks, dataset, config.batch_size, counter, logger,
                         samples_per_insert)
        self._config = config
        self._target_entropy = float(
            -networks.action_size if config.target_entropy is None else config.target_entropy)
        self._actor_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                      networks.actor_variables)
        self._critic_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                       networks.critic_variables)
        self._temperature_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                            [networks.log_temperature])
        self._rng = random_generator(seed)
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation, action = data[tr.OBSERVATION], data[tr.ACTION]
        next_observation = data[tr.NEXT_OBSERVATION]
        reward = c.reward_scale * tf.cast(data[tr.REWARD], tf.float32)
        discount = tf.cast(data[tr.DISCOUNT], tf.float32)
        alpha = tf.exp(nets.log_temperature)
        shape = tf.shape(action)

        next_action, next_log_prob = nets.sample(next_observation, self._rng.normal(shape))
        next_q = tf.minimum(*nets.q_values(next_observation, next_action, target=True))
        target = tf.stop_gradient(reward + discount * (next_q - alpha * next_log_prob))
        with tf.GradientTape() as tape:
            q_0, q_1 = nets.q_values(observation, action)
            critic_loss = (tf.reduce_mean(tf.square(q_0 - target))
                           + tf.reduce_mean(tf.square(q_1 - target)))
        critic_norm = minimize(tape, critic_loss, nets.critic_variables,
                               self._critic_optimizer, c.max_gradient_norm)

        with tf.GradientTape() as tape:
            new_action, log_prob = nets.sample(observation, self._rng.normal(shape))
            q_new = tf.minimum(*nets.q_values(observation, new_action))
            actor_loss = tf.reduce_mean(alpha * log_prob - q_new)
        actor_norm = minimize(tape, actor_loss, nets.actor_variables,
                              self._actor_optimizer, c.max_gradient_norm)

        entropy_gap = tf.stop_gradient(log_prob + self._target_entropy)
        with tf.GradientTape() as tape:
            temperature_loss = -tf.reduce_mean(nets.log_temperature * entropy_gap)
        minimize(tape, temperature_loss, [nets.log_temperature],
                 self._temperature_optimizer, None)

        update_target(nets.target_critic_variables, nets.critic_variables, c.tau)
        return {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "temperature": alpha,
            "entropy": -tf.reduce_mean(log_prob),
            "mean_q": tf.reduce_mean(q_0),
            "critic_gradient_norm": critic_norm,
            "actor_gradient_norm": actor_norm,
        }

    def checkpoint_objects(self) -> dict[str, Any]:
        nets = self._networks
        return {
            "networks": nets,
            "critic_optimizer": self._critic_optimizer,
            "actor_optimizer": self._actor_optimizer,
            "temperature_optimizer": self._temperature_optimizer,
            "rng": self._rng,
            "step": self.step_variable,
        }
