"""The TD3 learner: n-step transitions in; critics every step, actor and targets delayed."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.td3.config import TD3Config
from seed_agents.agents.td3.networks import TD3Networks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.deterministic import (
    clipped_double_q_target,
    critic_regression,
    dpg_loss,
    smoothed_target_action,
    td3_bc_actor_loss,
)
from seed_agents.networks.actor_critic import follow
from seed_agents.policies.inputs import random_generator
from seed_agents.replay import transitions as tr
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class TD3Learner(TransitionLearner):
    """TD3 (TD3+BC with `bc_alpha`) on a batch of transitions (o, a, R, D, o').

    Per step:
      critics: y = R + D min_i Q'_i(o', clip(pi'(o') + clip(eps, -c, c), -1, 1)),
               loss sum_i mean (Q_i(o, a) - y)^2;
      every `policy_delay` steps: the actor ascends Q_1(o, pi(o)) (TD3+BC: scaled, plus
               the distance to the data's action), then actor and critic targets
               follow by Polyak averaging.
    """

    def __init__(self, networks: TD3Networks, dataset: tf.data.Dataset, config: TD3Config,
                 counter: Counter | None = None, logger: Logger | None = None,
                 samples_per_insert: SamplesPerInsert | None = None,
                 seed: int | None = None):
        super().__init__(networks, dataset, config.batch_size, counter, logger,
                         samples_per_insert)
        self._config = config
        self._actor_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                      networks.actor.weights)
        self._critic_optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                       networks.critics.weights)
        self._rng = random_generator(seed)
        self._actor_loss = tf.Variable(float("nan"), trainable=False, name="actor_loss")
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation, action = data[tr.OBSERVATION], tf.cast(data[tr.ACTION], tf.float32)
        next_observation = data[tr.NEXT_OBSERVATION]
        reward = tf.cast(data[tr.REWARD], tf.float32)
        discount = tf.cast(data[tr.DISCOUNT], tf.float32)

        noise = c.policy_noise * self._rng.normal(tf.shape(action))
        next_action = smoothed_target_action(nets.target_actor(next_observation), noise,
                                             c.noise_clip)
        target = clipped_double_q_target(reward, discount,
                                         nets.target_critics(next_observation, next_action))
        with tf.GradientTape() as tape:
            q = nets.critics(observation, action)
            critic_loss = critic_regression(q, target)
        critic_norm = minimize(tape, critic_loss, nets.critics.weights,
                               self._critic_optimizer, c.max_gradient_norm)

        def actor_and_targets() -> tf.Tensor:
            with tf.GradientTape() as tape:
                policy_action = nets.actor(observation)
                q_policy = nets.critics(observation, policy_action)[0]
                loss = (dpg_loss(q_policy) if c.bc_alpha is None else
                        td3_bc_actor_loss(q_policy, policy_action, action, c.bc_alpha))
            minimize(tape, loss, nets.actor.weights, self._actor_optimizer,
                     c.max_gradient_norm)
            follow(nets.target_actor, nets.actor, c.tau)
            follow(nets.target_critics, nets.critics, c.tau)
            return loss

        # This step's number (the shell counts it after `_train`): the first updates the
        # actor, as CleanRL's `global_step % policy_frequency == 0` does.
        # The actor's loss is logged as of its last update (NaN before the first), so that
        # every row of the logs has one.
        self._actor_loss.assign(tf.cond(self.every(c.policy_delay), actor_and_targets,
                                        self._actor_loss.read_value))
        nets.updates.assign_add(1)
        return {"critic_loss": critic_loss, "actor_loss": self._actor_loss.read_value(),
                "mean_q": tf.reduce_mean(q[0]), "critic_gradient_norm": critic_norm}

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"networks": self._networks, "critic_optimizer": self._critic_optimizer,
                "actor_optimizer": self._actor_optimizer, "rng": self._rng,
                "step": self.step_variable}
