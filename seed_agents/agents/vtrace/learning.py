"""The V-trace learner: unrolls from the replay queue in, updated variables out."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tree

from seed_agents import core
from seed_agents.agents.batches import Batches
from seed_agents.agents.vtrace import losses
from seed_agents.agents.vtrace.acting import POLICY_VERSION
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.agents.vtrace.vtrace import vtrace_returns
from seed_agents.replay import unrolls
from seed_agents.utils.counting import Counter
from seed_agents.utils.loggers import Logger, NoOpLogger

_FIRST, _LAST = 0, 2


def _time_major(x: tf.Tensor) -> tf.Tensor:
    perm = [1, 0, *range(2, x.shape.rank)]
    return tf.transpose(x, perm)


class VTraceLearner(core.Learner):
    """IMPALA's learner: V-trace targets, policy-gradient + baseline + entropy losses.

    The network it trains is the very object the inference policy reads, so an update is
    visible to acting at the next batch. `step` returns an empty dict when no batch came
    within the dataset's timeout (see `make_dataset`): a caller's loop then gets to check
    its stop event instead of blocking forever.

    Besides the losses, each step logs what a run needs to be read: the learning rate and
    entropy cost of the moment (annealed when the config says so), `batch_reuse` (the
    gradient steps taken on each batch), `explained_variance` of the value against its
    V-trace targets, and `policy_lag`: the mean number of learner steps between the
    variables that acted each row (the policy's `policy_version` extra) and the learner's
    variables now.
    """

    def __init__(
        self,
        network: PolicyValueNetwork,
        dataset: tf.data.Dataset,
        config: VTraceConfig,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ):
        self._network = network
        self._batches = Batches(dataset)
        self._config = config
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._optimizer = tf.keras.optimizers.Adam(
            config.learning_rate, beta_2=config.adam_beta2, epsilon=config.adam_epsilon
        )
        self._samples_per_step = config.batch_size * config.unroll_length
        # Schedules are functions of the step count: not state of their own to checkpoint.
        self._entropy_cost = tf.Variable(config.entropy_cost, dtype=tf.float32,
                                         trainable=False, name="entropy_cost")
        self._train = tf.function(self._train_steps)
        # A variable, not an int, so that a checkpoint carries it (see checkpoint_objects).
        self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_steps")

    @property
    def network(self) -> PolicyValueNetwork:
        return self._network

    def _loss(self, data: dict[str, Any]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        c = self._config
        rows = {
            k: tree.map_structure(_time_major, v)
            for k, v in data.items()
            if k != unrolls.START_STATE
        }
        step_type = tf.cast(rows[unrolls.STEP_TYPE], tf.int32)
        state = data.get(unrolls.START_STATE, ())
        logits, values = self._network.unroll(
            rows[unrolls.OBSERVATION], rows[unrolls.PREV_ACTION], step_type == _FIRST, state
        )
        # Row t holds the action at t; the reward and discount of t -> t+1 are in row t+1.
        actions = tf.cast(rows[unrolls.ACTION][:-1], tf.int32)
        rewards = rows[unrolls.REWARD][1:]
        if c.reward_clip is not None:
            rewards = tf.clip_by_value(rewards, -c.reward_clip, c.reward_clip)
        discounts = c.discount * rows[unrolls.DISCOUNT][1:]
        mask = tf.cast(step_type[:-1] != _LAST, tf.float32)
        target_logits = logits[:-1]
        behaviour_logits = rows[unrolls.EXTRAS]["logits"][:-1]
        log_rhos = _log_prob(target_logits, actions) - _log_prob(behaviour_logits, actions)
        returns = vtrace_returns(
            log_rhos,
            discounts,
            rewards,
            values[:-1],
            values[-1],
            mask=mask,
            clip_rho_threshold=c.clip_rho_threshold,
            clip_pg_rho_threshold=c.clip_pg_rho_threshold,
            clip_c_threshold=c.clip_c_threshold,
            lambda_=c.vtrace_lambda,
        )
        if c.ppo_clip is None:
            advantages = returns.pg_advantages
        else:
            # APPO: V-trace value targets, PPO's clipped surrogate for the policy.
            vs_next = tf.concat([returns.vs[1:], values[-1:]], axis=0)
            advantages = rewards + discounts * vs_next - values[:-1]
        if c.normalize_advantages:
            advantages = losses.normalize(advantages, mask)
        if c.ppo_clip is None:
            pg_loss = losses.policy_gradient_loss(target_logits, actions, advantages, mask)
        else:
            pg_loss = losses.clipped_surrogate_loss(log_rhos, advantages, c.ppo_clip, mask)
        baseline_loss = losses.baseline_loss(returns.vs, values[:-1], mask)
        entropy_loss = losses.entropy_loss(target_logits, mask)
        loss = pg_loss + c.baseline_cost * baseline_loss + self._entropy_cost * entropy_loss
        metrics = {
            "loss": loss,
            "pg_loss": pg_loss,
            "baseline_loss": baseline_loss,
            "entropy": -entropy_loss,
            "mean_rho": losses.masked_mean(tf.exp(log_rhos), mask),
            # Spread of the value over the batch's states: exactly 0 when the network's
            # output no longer depends on its input (e.g. every first-layer ReLU dead).
            "value_std": tf.math.reduce_std(values),
            "explained_variance": losses.explained_variance(returns.vs, values[:-1], mask),
        }
        extras = rows[unrolls.EXTRAS]
        if POLICY_VERSION in extras:  # policies of other agents may not stamp versions
            acted = tf.cast(extras[POLICY_VERSION][:-1], tf.float32)
            lag = tf.cast(self._network.version, tf.float32) - acted
            known = mask * tf.cast(acted >= 0, tf.float32)  # -1: an unknown policy acted
            metrics["policy_lag"] = tf.where(tf.reduce_sum(known) > 0,
                                             losses.masked_mean(lag, known), float("nan"))
        return loss, metrics

    def _train_step(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss, metrics = self._loss(data)
        variables = self._network.trainable_variables
        gradients = tape.gradient(loss, variables)
        norm = tf.linalg.global_norm(gradients)
        if self._config.max_gradient_norm is not None:
            gradients, _ = tf.clip_by_global_norm(
                gradients, self._config.max_gradient_norm, use_norm=norm
            )
        self._optimizer.apply_gradients(zip(gradients, variables, strict=True))
        metrics["gradient_norm"] = norm
        return metrics

    def _train_steps(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        # All the gradient steps on one batch in one graph call: the Python-to-TF hand-off
        # costs about as much as a step of a small network. The loop is unrolled at trace
        # time: a graph loop (tf.range) traced faster (LSTM: 4.2 s vs 6.0 s once) but ran
        # each MLP step 60% slower (4.4 ms vs 2.75 ms per batch, measured here).
        for _ in range(self._config.sgd_steps_per_batch):
            metrics = self._train_step(data)
        return metrics

    def _apply_schedules(self) -> dict[str, float]:
        c = self._config
        fraction = 1.0
        if c.anneal_steps is not None:
            progress = min(self.num_steps / c.anneal_steps, 1.0)
            fraction = 1.0 - progress
        learning_rate = c.learning_rate * (c.final_learning_rate_fraction
                                           + (1.0 - c.final_learning_rate_fraction) * fraction)
        entropy_cost = c.entropy_cost * (c.final_entropy_fraction
                                         + (1.0 - c.final_entropy_fraction) * fraction)
        if c.anneal_steps is not None:
            self._optimizer.learning_rate = learning_rate
            self._entropy_cost.assign(entropy_cost)
        return {"learning_rate": learning_rate, "entropy_cost": entropy_cost,
                "batch_reuse": float(c.sgd_steps_per_batch)}

    def step(self) -> dict[str, float]:
        sample = self._batches.next()
        if sample is None:
            return {}
        schedules = self._apply_schedules()
        metrics = {k: float(v) for k, v in self._train(sample.data).items()}
        metrics.update(schedules)
        self._num_steps.assign_add(1)
        self._network.version.assign(self._num_steps)
        counts = self._counter.increment(
            learner_steps=1, learner_samples=self._samples_per_step
        )
        self._logger.write({**counts, **metrics})
        return metrics

    def get_variables(self, names=("policy",)) -> list[list[np.ndarray]]:
        return [[v.numpy() for v in self._network.variables] for _ in names]

    def checkpoint_objects(self) -> dict[str, Any]:
        # Slots exist only once the optimizer is built: built now, a restore fills them at
        # once and its check that every object matched covers them too (unbuilt, TF
        # would restore them later, when the first step builds them, unchecked).
        self._optimizer.build(self._network.trainable_variables)
        return {"network": self._network, "optimizer": self._optimizer,
                "step": self._num_steps}

    def save(self) -> dict[str, Any]:
        return {
            "num_steps": self.num_steps,
            "network": [v.numpy() for v in self._network.variables],
            "optimizer": [v.numpy() for v in self._optimizer.variables],
        }

    def restore(self, state: dict[str, Any]) -> None:
        for variable, value in zip(self._network.variables, state["network"], strict=True):
            variable.assign(value)
        if state["optimizer"]:
            if not self._optimizer.variables:
                self._optimizer.build(self._network.trainable_variables)
            for variable, value in zip(self._optimizer.variables, state["optimizer"],
                                       strict=True):
                variable.assign(value)
        self._num_steps.assign(int(state["num_steps"]))
        self._network.version.assign(self._num_steps)

    @property
    def num_steps(self) -> int:
        return int(self._num_steps.numpy())


def _log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)


