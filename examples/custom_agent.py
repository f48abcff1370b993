"""A different agent from the same parts: REINFORCE with a learned baseline.

Only the agent-specific pieces are written here (networks, policy, learner, builder); the
environments, Reverb queue, unroll assembly, central inference server and launcher are
the toolkit's. Returns are computed within each unroll and bootstrapped from the baseline
where the unroll is cut, so it learns from the same fixed-length unrolls as V-trace.

    python examples/custom_agent.py --steps 200000
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import tensorflow as tf
from dm_env import specs

from builders.base import AgentBuilder
from launch.backends.inprocess import run_inprocess
from launch.experiment import Experiment
from seed_agents import core
from seed_agents.replay import make_dataset, queue_table, unroll_signature
from seed_agents.replay import unrolls as u


def mlp(sizes, out, input_size):
    layers = [tf.keras.layers.Dense(s, activation="relu") for s in sizes]
    model = tf.keras.Sequential([*layers, tf.keras.layers.Dense(out)])
    model.build((None, input_size))  # variables exist before any tf.function traces
    return model


@dataclasses.dataclass
class Networks:
    policy: tf.keras.Model
    baseline: tf.keras.Model

    @property
    def variables(self):
        """What the evaluator loads the learner's `get_variables(["policy"])` into."""
        return self.policy.variables


class SamplingPolicy(core.Policy):
    """Samples from the policy network's logits; feed-forward, so no state."""

    def __init__(self, networks: Networks, num_actions: int):
        self._net = networks.policy
        self.extras_spec = {"logits": specs.Array((num_actions,), np.float32)}
        self.state_spec = ()
        self._step = tf.function(self._tf_step)

    def _tf_step(self, observation):
        logits = self._net(observation)
        return tf.random.categorical(logits, 1, dtype=tf.int32)[:, 0], logits

    def initial_state(self, batch_size):
        return ()

    def step(self, observation, prev_action, state, env_ids=None):
        action, logits = self._step(tf.constant(observation))
        return action.numpy(), {"logits": logits.numpy()}, ()


class ReinforceLearner(core.Learner):
    def __init__(self, networks: Networks, dataset, discount, learning_rate, counter=None):
        self._nets, self._dataset, self._discount = networks, dataset, discount
        self._iterator = iter(dataset)
        self._optimizer = tf.keras.optimizers.Adam(learning_rate)
        self._counter = counter
        self._train = tf.function(self._train_step)

    def _train_step(self, data):
        obs = tf.transpose(data[u.OBSERVATION], [1, 0, 2])  # [T+1, B, obs]
        actions = tf.transpose(data[u.ACTION])[:-1]
        rewards = tf.transpose(data[u.REWARD])[1:]
        discounts = self._discount * tf.transpose(data[u.DISCOUNT])[1:]
        valid = tf.cast(tf.transpose(data[u.STEP_TYPE])[:-1] != 2, tf.float32)  # not LAST
        with tf.GradientTape() as tape:
            logits = tf.map_fn(self._nets.policy, obs[:-1])
            values = tf.squeeze(tf.map_fn(self._nets.baseline, obs), -1)
            # Discounted returns, cut at episode ends (valid = 0) and bootstrapped at T.
            returns = tf.scan(
                lambda g, x: x[0] + x[1] * (x[2] * g + (1 - x[2]) * x[3]),
                (rewards, discounts, valid, values[1:]),
                initializer=tf.stop_gradient(values[-1]), reverse=True)
            advantage = tf.stop_gradient(returns) - values[:-1]
            log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(actions, logits)
            n = tf.reduce_sum(valid)
            pg = -tf.reduce_sum(valid * log_prob * tf.stop_gradient(advantage)) / n
            baseline = tf.reduce_sum(valid * advantage**2) / n
            loss = pg + 0.5 * baseline
        variables = self._nets.policy.trainable_variables + self._nets.baseline.trainable_variables
        grads = tape.gradient(loss, variables)
        self._optimizer.apply_gradients(zip(grads, variables, strict=True))
        return {"loss": loss}

    def step(self):
        try:
            sample = next(self._iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            self._iterator = iter(self._dataset)  # no data within the timeout: try again
            return {}
        metrics = {k: float(v) for k, v in self._train(sample.data).items()}
        if self._counter is not None:
            self._counter.increment(learner_steps=1)
        return metrics

    def get_variables(self, names):
        return [[v.numpy() for v in self._nets.policy.variables] for _ in names]


@dataclasses.dataclass
class ReinforceBuilder(AgentBuilder):
    unroll_length: int = 20
    batch_size: int = 16
    discount: float = 0.99
    learning_rate: float = 1e-3

    def make_networks(self, env_spec):
        size = int(np.prod(env_spec.observations.shape))
        return Networks(mlp((64,), env_spec.num_actions, size), mlp((64,), 1, size))

    def make_policy(self, networks, env_spec, evaluation=False, seed=None, num_envs=1):
        return SamplingPolicy(networks, env_spec.num_actions)

    def make_replay_tables(self, env_spec, policy):
        signature = unroll_signature(env_spec, self.unroll_length, policy.extras_spec)
        return [queue_table(self.table, 4 * self.batch_size, signature)]

    def make_learner(self, networks, replay_address, counter=None, logger=None):
        dataset = make_dataset(replay_address, self.table, self.batch_size)
        return ReinforceLearner(networks, dataset, self.discount, self.learning_rate, counter)


def main() -> None:
    parser = argparse.ArgumentParser(description="REINFORCE with a baseline on CartPole.")
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    experiment = Experiment(ReinforceBuilder(), "gym:CartPole-v1", num_runners=2,
                            envs_per_runner=16, max_env_steps=args.steps)
    print(run_inprocess(experiment).summary())


if __name__ == "__main__":
    main()
