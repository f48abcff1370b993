"""The V-trace learner: unrolls from the replay queue in, updated variables out."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tree

from seed_agents import core
from seed_agents.agents.vtrace.acting import POLICY_VERSION
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.networks import PolicyValueNetwork, ValueNormalizer
from seed_agents.learning.batches import Batches
from seed_agents.learning.optimizers import built
from seed_agents.losses import policy_gradient as losses
from seed_agents.losses.vtrace import VTraceReturns, vtrace_returns
from seed_agents.networks.health import feature_health
from seed_agents.replay import unrolls
from seed_agents.utils.counting import Counter
from seed_agents.utils.graph_functions import graph_function
from seed_agents.utils.loggers import Logger, NoOpLogger

_FIRST, _LAST = 0, 2
# Valid rows of a minibatch: what its masked means are weighed with when the minibatches'
# metrics are merged. Not logged.
_VALID_ROWS = "valid_rows"
# The learner's logits on a batch before the learner step's updates (`ppo_proximal=
# "batch_start"`), carried beside the batch's own fields so that minibatches cut them alike.
_PROXIMAL_LOGITS = "proximal_logits"
# Means over valid rows: merged across minibatches weighed by their valid rows.
_ROW_WEIGHED = ("kl", "step_kl")


class _Forward(NamedTuple):
    """One pass of the learner's network over a batch, with its V-trace targets.

    All time-major: [T+1, B] for the rows the network saw, [T, B] for transitions.
    """

    rows: dict[str, Any]
    head: tf.Tensor  # the value head's outputs: normalized values under value_normalization
    values: tf.Tensor  # the values V-trace uses, unnormalized
    actions: tf.Tensor
    rewards: tf.Tensor
    discounts: tf.Tensor
    mask: tf.Tensor
    target_logits: tf.Tensor
    behaviour_logits: tf.Tensor
    log_rhos: tf.Tensor
    returns: VTraceReturns
    features: tf.Tensor  # what the heads read, [T+1, B, F]


def adapt_learning_rate(learning_rate: float, kl: float, kl_target: float, factor: float,
                        min_learning_rate: float, max_learning_rate: float) -> float:
    """rl_games' adaptive rule: the next learning rate after a step that moved the policy kl.

    Above 2 * kl_target the step was too large: divide by `factor` (not below the floor);
    below kl_target / 2, too timid: multiply (not above the cap); in between, and for a
    NaN kl, keep it. The dead band between the two keeps the rate from oscillating on
    every step's noise.
    """
    if kl > 2.0 * kl_target:
        return max(learning_rate / factor, min_learning_rate)
    if kl < 0.5 * kl_target:
        return min(learning_rate * factor, max_learning_rate)
    return learning_rate


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
    variables now; and `kl`, the mean KL(mu || pi) from the behaviour policy mu to the
    learner's pi over the batch's valid rows, with pi as the last epoch's gradient steps
    saw it (each minibatch's rows at its own step): how far one batch's updates moved the
    policy from the one that acted.

    Minibatches (`num_minibatches` k): every epoch draws a permutation of the batch's
    unrolls and cuts it into k minibatches of whole unrolls. The permutation comes from
    `tf.random.experimental.stateless_shuffle` seeded with (learner step, epoch): a new
    order per epoch, no random state to checkpoint, and a resumed run shuffles as the
    uninterrupted one would have. The logged metrics are the last epoch's, averaged over
    its minibatches (the KL weighed by valid rows, so it is the whole batch's mean).

    Proximal policy (`ppo_proximal="batch_start"`): before the epochs, one forward pass
    (in minibatch-sized chunks) records the learner's own logits on the batch, pi_prox;
    the clip then bounds pi/pi_prox and each sample is weighed by min(pi_prox/mu,
    `clip_pg_rho_threshold`), and `step_kl` = KL(pi_prox || pi) says how far this step
    moved the policy, apart from the lag that `kl` also holds.

    Adaptive learning rate (`kl_target`): after each step, `adapt_learning_rate` sets the
    optimizer's learning rate variable from the step's `kl` (`step_kl` with a proximal
    policy: the lag is not this step's move); that variable is the state
    (the Adam optimizer's own, which its checkpoint carries; `checkpoint_objects` also
    names it). The logged `learning_rate` is the one this step's gradients were applied with.

    Value normalization (`value_normalization`): a `ValueNormalizer` holds the statistics
    of the V-trace targets, updated once per learner step before its gradient steps (the
    PopArt order: targets are normalized with statistics that include them, so even the
    first batch trains the head on targets of order 1), from one extra forward pass over
    the batch. The statistics live on the learner, not on the network: the policy acts
    without values; the network's variables are what local actors and evaluators copy one
    for one (`get_variables`) and what checkpoints of runs without normalization hold, so
    statistics on it would change its variable list with a config field the builder's
    networks do not see. The price: under normalization the network's own value output is
    the normalized one, and `value_normalizer.unnormalize` turns it into a value.
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
        self._batches = Batches(dataset, config.batch_size)
        self._config = config
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        variables = network.trainable_variables
        # With a torso rate of its own, the torso gets a second Adam; the first keeps the
        # rest, and its learning rate variable stays the one every schedule sets.
        self._torso_optimizer = None
        self._torso_refs: frozenset = frozenset()
        if config.torso_learning_rate_scale != 1.0:
            torso = network.torso_variables
            self._torso_refs = frozenset(v.ref() for v in torso)
            variables = [v for v in variables if v.ref() not in self._torso_refs]
            self._torso_optimizer = built(self._adam(
                config.learning_rate * config.torso_learning_rate_scale), torso)
        self._optimizer = built(self._adam(config.learning_rate), variables)
        # The optimizer's own variable: the Adam checkpoint already carries it, and it is
        # state when kl_target adapts it (with anneal_steps, a function of the step).
        self._learning_rate = self._optimizer.learning_rate
        self._samples_per_step = config.batch_size * config.unroll_length
        self._decoupled = config.ppo_proximal == "batch_start"  # the config checks ppo_clip
        self._value_normalizer: ValueNormalizer | None = None
        if config.value_normalization is not None:
            self._value_normalizer = ValueNormalizer(config.value_normalization_decay)
        # PopArt: each statistics update rescales this head to preserve the values.
        self._preserved_head = (network.value_head if config.value_normalization == "popart"
                                else None)
        # Schedules are functions of the step count: not state of their own to checkpoint.
        self._entropy_cost = tf.Variable(config.entropy_cost, dtype=tf.float32,
                                         trainable=False, name="entropy_cost")
        self._train = graph_function(self._train_steps)
        # One function however many times _train_steps calls it (see graph_functions).
        self._gradient_step = graph_function(self._train_step, inline=False)
        # A variable, not an int, so that a checkpoint carries it (see checkpoint_objects).
        self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_steps")

    def _adam(self, learning_rate: float) -> tf.keras.optimizers.Adam:
        c = self._config
        return tf.keras.optimizers.Adam(learning_rate, beta_2=c.adam_beta2,
                                        epsilon=c.adam_epsilon)

    def _set_learning_rate(self, learning_rate: float) -> None:
        """Sets the step size of the heads and, scaled, of the torso's own Adam."""
        self._learning_rate.assign(learning_rate)
        if self._torso_optimizer is not None:
            self._torso_optimizer.learning_rate.assign(
                learning_rate * self._config.torso_learning_rate_scale)

    @property
    def network(self) -> PolicyValueNetwork:
        return self._network

    @property
    def value_normalizer(self) -> ValueNormalizer | None:
        """The value targets' statistics under `value_normalization`; None without it."""
        return self._value_normalizer

    @property
    def learning_rate(self) -> float:
        return float(self._learning_rate.numpy())

    def _forward(self, data: dict[str, Any]) -> _Forward:
        c = self._config
        rows = {
            k: tree.map_structure(_time_major, v)
            for k, v in data.items()
            if k != unrolls.START_STATE
        }
        step_type = tf.cast(rows[unrolls.STEP_TYPE], tf.int32)
        state = data.get(unrolls.START_STATE, ())
        logits, head, features = self._network.unroll_with_features(
            rows[unrolls.OBSERVATION], rows[unrolls.PREV_ACTION], step_type == _FIRST, state
        )
        values = head
        if self._value_normalizer is not None:
            values = self._value_normalizer.unnormalize(head)
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
        return _Forward(rows, head, values, actions, rewards, discounts, mask, target_logits,
                        behaviour_logits, log_rhos, returns, features)

    def _loss(self, data: dict[str, Any]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        c = self._config
        f = self._forward(data)
        rewards, discounts, mask, values, returns = (f.rewards, f.discounts, f.mask, f.values,
                                                     f.returns)
        if c.ppo_clip is None:
            advantages = returns.pg_advantages
        else:
            # APPO: V-trace value targets, PPO's clipped surrogate for the policy.
            vs_next = tf.concat([returns.vs[1:], values[-1:]], axis=0)
            advantages = rewards + discounts * vs_next - values[:-1]
        if c.normalize_advantages:
            advantages = losses.normalize(advantages, mask)
        log_ratios = f.log_rhos  # pi/mu, unless a proximal policy takes mu's place below
        proximal_logits = f.rows.get(_PROXIMAL_LOGITS)
        if proximal_logits is not None:
            proximal_log_probs = _log_prob(proximal_logits, f.actions)
            log_ratios = _log_prob(f.target_logits, f.actions) - proximal_log_probs
            # The lag's importance weight pi_prox/mu, truncated as V-trace truncates rho.
            weights = tf.exp(proximal_log_probs - _log_prob(f.behaviour_logits, f.actions))
            if c.clip_pg_rho_threshold is not None:
                weights = tf.minimum(weights, c.clip_pg_rho_threshold)
            advantages = weights * advantages
        if c.ppo_clip is None:
            pg_loss = losses.policy_gradient_loss(f.target_logits, f.actions, advantages, mask)
        else:
            pg_loss = losses.clipped_surrogate_loss(log_ratios, advantages, c.ppo_clip, mask)
        if self._value_normalizer is None:
            baseline_loss = losses.baseline_loss(returns.vs, values[:-1], mask)
        else:
            # In normalized space: 0.5 * ((vs - mean) / std - head)^2 is of order 1 whatever
            # the reward scale, so baseline_cost means the same on every task.
            baseline_loss = losses.baseline_loss(self._value_normalizer.normalize(returns.vs),
                                                 f.head[:-1], mask)
        entropy_loss = losses.entropy_loss(f.target_logits, mask)
        loss = pg_loss + c.baseline_cost * baseline_loss + self._entropy_cost * entropy_loss
        metrics = {
            "loss": loss,
            "pg_loss": pg_loss,
            "baseline_loss": baseline_loss,
            "entropy": -entropy_loss,
            "mean_rho": losses.masked_mean(tf.exp(f.log_rhos), mask),
            "kl": losses.kl_divergence(f.behaviour_logits, f.target_logits, mask),
            # Spread of the value over the batch's states: exactly 0 when the network's
            # output no longer depends on its input (e.g. every first-layer ReLU dead).
            "value_std": tf.math.reduce_std(values),
            "explained_variance": losses.explained_variance(returns.vs, values[:-1], mask),
            **feature_health(f.features[:-1], mask),
            _VALID_ROWS: tf.reduce_sum(mask),
        }
        if c.ppo_clip is not None:
            metrics["clip_fraction"] = losses.clip_fraction(log_ratios, c.ppo_clip, mask)
        if proximal_logits is not None:
            metrics["step_kl"] = losses.kl_divergence(proximal_logits, f.target_logits, mask)
        extras = f.rows[unrolls.EXTRAS]
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
        pairs = list(zip(gradients, variables, strict=True))
        if self._torso_optimizer is None:
            self._optimizer.apply_gradients(pairs)
        else:
            self._optimizer.apply_gradients(
                [(g, v) for g, v in pairs if v.ref() not in self._torso_refs])
            self._torso_optimizer.apply_gradients(
                [(g, v) for g, v in pairs if v.ref() in self._torso_refs])
        metrics["gradient_norm"] = norm
        return metrics

    def _minibatches(self, data: dict[str, Any], epoch: int) -> list[dict[str, Any]]:
        """The batch's unrolls (batch-major: axis 0), shuffled and cut into minibatches."""
        c = self._config
        if c.num_minibatches == 1:
            return [data]  # one full-batch step: its order does not matter
        seed = tf.stack([self._num_steps, tf.constant(epoch, tf.int64)])
        return [tree.map_structure(lambda x, rows=rows: tf.gather(x, rows), data)
                for rows in minibatch_indices(c.batch_size, c.num_minibatches, seed)]

    def _train_steps(self, data: dict[str, Any]) -> dict[str, tf.Tensor]:
        # All the gradient steps on one batch in one graph call: the Python-to-TF hand-off
        # costs about as much as a step of a small network. The loop is unrolled at trace
        # time: a graph loop (tf.range) ran each MLP step 60% slower (4.4 ms vs 2.75 ms per
        # batch, measured here). Each iteration calls one gradient-step function, traced
        # and optimized once rather than copied per call (graph_functions, inline=False).
        forward = None
        if self._value_normalizer is not None:
            forward = self._forward(data)
            self._value_normalizer.update(forward.returns.vs, forward.mask,
                                          preserve=self._preserved_head)
        if self._decoupled:
            # The statistics' update rescales the value head only: the logits stand.
            proximal = (_time_major(forward.target_logits) if forward is not None
                        else self._proximal_logits(data))
            data = {**data, _PROXIMAL_LOGITS: tf.stop_gradient(proximal)}
        for epoch in range(self._config.sgd_steps_per_batch):
            epoch_metrics = [self._gradient_step(minibatch)
                             for minibatch in self._minibatches(data, epoch)]
        metrics = _merge_minibatch_metrics(epoch_metrics)
        normalizer = self._network.observation_normalizer
        if normalizer is not None:
            # After the gradient steps: they train on the statistics the batch was acted
            # with (up to policy lag); the new ones reach the policy with these weights.
            # The unroll's last row is the next unroll's first: counted there.
            observations = data[unrolls.OBSERVATION][:, :-1]
            normalizer.update(tf.reshape(observations, tf.concat(
                [[-1], tf.shape(observations)[2:]], 0)))
        if self._value_normalizer is not None:
            metrics["value_normalization_mean"] = self._value_normalizer.mean
            metrics["value_normalization_std"] = self._value_normalizer.std
        return metrics

    def _proximal_logits(self, data: dict[str, Any]) -> tf.Tensor:
        """The learner's logits on the batch's transitions now, [B, T, A] (batch-major, as
        the batch): a forward pass in minibatch-sized chunks, whose activations are no
        larger than a gradient step's."""
        c = self._config
        size = c.batch_size // c.num_minibatches
        chunks = [
            _time_major(self._forward(tree.map_structure(
                lambda x, start=start: x[start:start + size], data)).target_logits)
            for start in range(0, c.batch_size, size)
        ]
        return tf.concat(chunks, axis=0)

    def _schedule_fraction(self) -> float:
        """How much of the schedule is left: 1 at the start, 0 from `anneal_steps` on (1
        throughout without a schedule)."""
        anneal_steps = self._config.anneal_steps
        if anneal_steps is None:
            return 1.0
        return 1.0 - min(self.num_steps / anneal_steps, 1.0)

    def learning_rate_cap(self) -> float:
        """The adaptive learning rate's cap now: `max_learning_rate`, annealed with a
        schedule to its `final_learning_rate_fraction` (never under the floor)."""
        c = self._config
        final = c.final_learning_rate_fraction
        cap = c.max_learning_rate * (final + (1.0 - final) * self._schedule_fraction())
        return max(cap, c.min_learning_rate)

    def _apply_schedules(self) -> dict[str, float]:
        c = self._config
        reuse = {"batch_reuse": float(c.sgd_steps_per_batch)}
        fraction = self._schedule_fraction()
        entropy_cost = c.entropy_cost * (c.final_entropy_fraction
                                         + (1.0 - c.final_entropy_fraction) * fraction)
        if c.anneal_steps is not None:
            self._entropy_cost.assign(entropy_cost)
        if c.kl_target is not None:
            # Adapted after each step; a schedule lowers only the cap, and a rate above the
            # cap comes down to it before the step.
            cap = self.learning_rate_cap()
            if self.learning_rate > cap:
                self._set_learning_rate(cap)
            return {"learning_rate": self.learning_rate, "learning_rate_cap": cap,
                    "entropy_cost": entropy_cost, **reuse}
        learning_rate = c.learning_rate * (c.final_learning_rate_fraction
                                           + (1.0 - c.final_learning_rate_fraction) * fraction)
        if c.anneal_steps is not None:
            self._set_learning_rate(learning_rate)
        return {"learning_rate": learning_rate, "entropy_cost": entropy_cost, **reuse}

    def close(self) -> None:
        self._batches.close()

    def step(self) -> dict[str, float]:
        sample = self._batches.next()
        if sample is None:
            return {}
        schedules = self._apply_schedules()
        metrics = {k: float(v) for k, v in self._train(sample.data).items()}
        metrics.update(schedules)
        c = self._config
        if c.kl_target is not None:
            kl = metrics["step_kl" if self._decoupled else "kl"]
            self._set_learning_rate(adapt_learning_rate(
                self.learning_rate, kl, c.kl_target, c.kl_adapt_factor,
                c.min_learning_rate, metrics["learning_rate_cap"]))
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
        objects = {"network": self._network, "optimizer": self._optimizer,
                   "step": self._num_steps}
        if self._torso_optimizer is not None:
            objects["torso_optimizer"] = self._torso_optimizer
        # Only where the config uses them: a checkpoint of a run without them keeps the
        # layout it always had, and restores into a learner that does not use them either.
        if self._value_normalizer is not None:
            objects["value_normalizer"] = self._value_normalizer
        if self._config.kl_target is not None:
            objects["learning_rate"] = self._learning_rate  # also under the optimizer
        return objects

    def save(self) -> dict[str, Any]:
        state = {
            "num_steps": self.num_steps,
            "network": [v.numpy() for v in self._network.variables],
            "optimizer": [v.numpy() for v in self._optimizer.variables],
        }
        if self._torso_optimizer is not None:
            state["torso_optimizer"] = [v.numpy() for v in self._torso_optimizer.variables]
        if self._value_normalizer is not None:
            state["value_normalizer"] = [v.numpy() for v in self._value_normalizer.variables]
        if self._config.kl_target is not None:
            state["learning_rate"] = self.learning_rate
        return state

    def restore(self, state: dict[str, Any]) -> None:
        # Checked first: the heads' optimizer of the other layout would not fit either.
        if state["optimizer"] and (self._torso_optimizer is None) != (
                "torso_optimizer" not in state):
            saved = "has" if "torso_optimizer" in state else "has no"
            raise ValueError(f"The saved state {saved} torso_optimizer: it is of a learner "
                             f"{'with' if saved == 'has' else 'without'} "
                             "torso_learning_rate_scale.")
        for variable, value in zip(self._network.variables, state["network"], strict=True):
            variable.assign(value)
        if state["optimizer"]:
            for variable, value in zip(self._optimizer.variables, state["optimizer"],
                                       strict=True):
                variable.assign(value)
        if self._torso_optimizer is not None and state["optimizer"]:
            for variable, value in zip(self._torso_optimizer.variables,
                                       state["torso_optimizer"], strict=True):
                variable.assign(value)
        if self._value_normalizer is not None:
            # Strict: without its statistics the restored value head's outputs mean nothing.
            if "value_normalizer" not in state:
                raise ValueError("The saved state has no value_normalizer statistics: it "
                                 "is of a learner without value_normalization.")
            for variable, value in zip(self._value_normalizer.variables,
                                       state["value_normalizer"], strict=True):
                variable.assign(value)
        if self._config.kl_target is not None and "learning_rate" in state:
            # Lenient: a state saved without adaptation restarts from `learning_rate`.
            self._set_learning_rate(state["learning_rate"])
        self._num_steps.assign(int(state["num_steps"]))
        self._network.version.assign(self._num_steps)

    @property
    def num_steps(self) -> int:
        return int(self._num_steps.numpy())


def minibatch_indices(batch_size: int, num_minibatches: int,
                      seed: tf.Tensor) -> list[tf.Tensor]:
    """A permutation of range(batch_size) drawn from `seed`, cut into equal minibatches.

    `seed` is a [2] integer tensor (the learner passes (learner step, epoch)); the same
    seed gives the same permutation, so nothing random needs to be checkpointed.
    `num_minibatches` must divide `batch_size` (the config checks it).
    """
    order = tf.random.experimental.stateless_shuffle(tf.range(batch_size), seed=seed)
    size = batch_size // num_minibatches
    return [order[i * size:(i + 1) * size] for i in range(num_minibatches)]


def _merge_minibatch_metrics(per_minibatch: list[dict[str, tf.Tensor]]
                             ) -> dict[str, tf.Tensor]:
    """The epoch's metrics: each the mean over its minibatches, the KLs weighed by valid
    rows.

    Weighed, a KL is the mean over every valid row of the batch, which the adaptive
    learning rate compares with its target; the others are read, not acted on.
    """
    if len(per_minibatch) == 1:
        metrics = dict(per_minibatch[0])
        metrics.pop(_VALID_ROWS)
        return metrics
    rows = [m[_VALID_ROWS] for m in per_minibatch]
    metrics = {key: tf.add_n([m[key] for m in per_minibatch]) / len(per_minibatch)
               for key in per_minibatch[0] if key != _VALID_ROWS}
    for key in _ROW_WEIGHED:
        if key in metrics:
            metrics[key] = (tf.add_n([m[key] * n for m, n in zip(per_minibatch, rows,
                                                                  strict=True)])
                            / tf.maximum(tf.add_n(rows), 1.0))
    return metrics


def _log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)


