"""The MPO learner: n-step transitions in; critic, policy and duals every step, targets on
a period."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seed_agents.agents.mpo.config import MPOConfig
from seed_agents.agents.mpo.networks import MPONetworks
from seed_agents.learning.gradients import minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.losses.deterministic import critic_regression
from seed_agents.losses.distributional import (
    categorical_cross_entropy,
    categorical_projection,
    mixture_and_means,
)
from seed_agents.losses.mpo import MIN_LOG_DUAL, mpo_policy_loss
from seed_agents.networks.actor_critic import CategoricalCritic, Critics, follow
from seed_agents.networks.mlp import flatten_observation
from seed_agents.policies.inputs import random_generator
from seed_agents.replay import transitions as tr
from seed_agents.replay.stats import SamplesPerInsert
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger


class MPOLearner(TransitionLearner):
    """MPO on a batch of transitions (o, a, R, D, o'), one `tf.function` per step.

    Per step, in order (pi' and Q' are the target copies; every action a critic sees is
    clipped into [-1, 1] first, as Acme's critic clips to the action spec):
      critic:  y = R + D mean_n Q'(o', a'_n), a'_n ~ pi'(o'), n = 1..num_samples;
               loss mean (Q(o, a) - y)^2 (D already holds gamma^n and 0 at
               termination: see `seed_agents.replay.transitions`). A categorical
               critic (DMPO) instead learns by cross-entropy towards R + D Z' projected
               onto its support, Z' the mixture over n of Z'(o', a'_n), and the E-step
               below takes Q'(o', a'_n) = E[Z'(o', a'_n)];
      E-step:  at o', on the critic target's own samples a'_n and values Q'(o', a'_n):
               weights softmax_n Q'(o', a'_n) / eta, and eta's dual loss;
      M-step:  the decoupled weighted maximum likelihood of the a'_n, each half held near
               pi' by its multiplier (`seed_agents.losses.mpo.mpo_policy_loss`);
               the policy and the duals step on their own Adams, then each log dual
               is floored at -18 (Acme's projection);
      targets: after steps 0, period, 2 period, ...: pi' <- pi, Q' <- Q (tau 1).
    As in Acme's TF learner, the policy improves at the next observations o', reusing
    the critic target's samples and values: one evaluation of the target critic at
    num_samples x B pairs per step (the cost that dominates an update) instead of two.
    The policy module is the one the inference policy reads: acting sees each update at
    once.
    """

    def __init__(
        self,
        networks: MPONetworks,
        dataset: tf.data.Dataset,
        config: MPOConfig,
        counter: Counter | None = None,
        logger: Logger | None = None,
        samples_per_insert: SamplesPerInsert | None = None,
        seed: int | None = None,
    ):
        super().__init__(networks, dataset, config.batch_size, counter, logger,
                         samples_per_insert)
        self._config = config
        self._policy_optimizer = built(tf.keras.optimizers.Adam(config.policy_step),
                                       networks.policy.weights)
        self._critic_optimizer = built(tf.keras.optimizers.Adam(config.critic_step),
                                       networks.critic.weights)
        self._dual_optimizer = built(tf.keras.optimizers.Adam(config.dual_learning_rate),
                                     networks.dual_variables)
        self._rng = random_generator(seed)
        self._train_step = graph_function(self._update)

    def _train(self, data: Any) -> dict[str, tf.Tensor]:
        return self._train_step(data)

    def _sample(self, mean: tf.Tensor, stddev: tf.Tensor) -> tf.Tensor:
        """num_samples draws of N(mean, stddev^2) per state, [N, B, d] (unclipped)."""
        shape = tf.concat([[self._config.num_samples], tf.shape(mean)], axis=0)
        return mean + stddev * self._rng.normal(shape)

    def _sampled_critic(self, critic: Critics | CategoricalCritic, observation: tf.Tensor,
                        actions: tf.Tensor) -> tf.Tensor:
        """The critic at (o_b, clip(a_nb, -1, 1)) for actions [N, B, d]: Q as [N, B], or a
        categorical critic's logits as [N, B, num_atoms]."""
        n = self._config.num_samples
        tiled = tf.tile(flatten_observation(observation), [n, 1])  # [N B, F], sample-major
        flat = tf.reshape(tf.clip_by_value(actions, -1.0, 1.0),
                          [-1, self._networks.action_size])
        out = critic(tiled, flat)
        if self._networks.distributional:
            return tf.reshape(out, [n, -1, tf.shape(out)[-1]])
        return tf.reshape(out[0], [n, -1])

    def _critic_step(self, observation: tf.Tensor, action: tf.Tensor, reward: tf.Tensor,
                     discount: tf.Tensor, next_observation: tf.Tensor,
                     actions: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """One critic update towards the target at the sampled next actions [N, B, d].

        Returns (loss, the online critic's Q(o, a) [B], the target critic's values
        Q'(o', a'_n) [N, B] that the E-step weighs, the gradient's norm)."""
        nets = self._networks
        sampled = self._sampled_critic(nets.target_critic, next_observation, actions)
        if nets.distributional:
            support = nets.critic.support
            mixture, next_q = mixture_and_means(sampled, support)
            target = categorical_projection(mixture, reward, discount, support)
        else:
            next_q = sampled
            target = tf.stop_gradient(reward + discount * tf.reduce_mean(next_q, axis=0))
        with tf.GradientTape() as tape:
            if nets.distributional:
                logits = nets.critic(observation, action)
                loss, q = categorical_cross_entropy(target, logits), nets.critic.q_value(logits)
            else:
                (q,) = nets.critic(observation, action)
                loss = critic_regression([q], target)
        norm = minimize(tape, loss, nets.critic.weights, self._critic_optimizer,
                        self._config.max_gradient_norm)
        return loss, q, next_q, norm

    def _update(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        c, nets = self._config, self._networks
        observation = data[tr.OBSERVATION]
        action = tf.clip_by_value(tf.cast(data[tr.ACTION], tf.float32), -1.0, 1.0)
        next_observation = data[tr.NEXT_OBSERVATION]
        reward = tf.cast(data[tr.REWARD], tf.float32)
        discount = tf.cast(data[tr.DISCOUNT], tf.float32)

        # The E- and M-steps below reuse these samples and values (see the docstring).
        target_mean, target_std = nets.target_policy(next_observation)
        actions = self._sample(target_mean, target_std)
        critic_loss, q, next_q, critic_norm = self._critic_step(
            observation, action, reward, discount, next_observation, actions)

        with tf.GradientTape(persistent=True) as tape:
            online_mean, online_std = nets.policy(next_observation)
            policy_loss, stats = mpo_policy_loss(
                online_mean, online_std, target_mean, target_std, actions,
                tf.stop_gradient(next_q),
                nets.log_temperature, nets.log_alpha_mean, nets.log_alpha_stddev,
                c.epsilon, c.epsilon_mean, c.epsilon_stddev, c.per_dim_constraining)
        policy_norm = minimize(tape, policy_loss, nets.policy.weights,
                               self._policy_optimizer, c.max_gradient_norm)
        minimize(tape, policy_loss, nets.dual_variables, self._dual_optimizer, None)
        del tape
        for dual in nets.dual_variables:
            dual.assign(tf.maximum(dual, MIN_LOG_DUAL))

        def update_targets() -> tf.Tensor:
            follow(nets.target_policy, nets.policy, c.tau)
            follow(nets.target_critic, nets.critic, c.tau)
            return tf.constant(True)

        # This step's number (the shell counts it after `_train`): step 0 updates, as
        # Acme's `num_steps % period == 0` (Acme copies before its step's update, this
        # after: the targets hold the networks as this step left them).
        tf.cond(self.every(c.target_update_period), update_targets,
                lambda: tf.constant(False))
        return {
            "critic_loss": critic_loss,
            "policy_loss": policy_loss,
            "mean_q": tf.reduce_mean(q),
            "critic_gradient_norm": critic_norm,
            "policy_gradient_norm": policy_norm,
            # How much the policy still explores: the M-step's std bound moves this
            # slowly, so a run whose returns while acting lag its evaluations shows it here.
            "policy_stddev": tf.reduce_mean(online_std),
            **stats,
        }

    def checkpoint_objects(self) -> dict[str, Any]:
        return {"networks": self._networks, "critic_optimizer": self._critic_optimizer,
                "policy_optimizer": self._policy_optimizer,
                "dual_optimizer": self._dual_optimizer, "rng": self._rng,
                "step": self.step_variable}
