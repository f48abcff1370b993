"""A different agent from the same parts: REINFORCE with a learned baseline.

Only the agent-specific pieces are written here (networks, policy, learner, builder); the
environments, Reverb queue, unroll assembly, central inference server and launcher are
the toolkit's. Returns are computed within each unroll and bootstrapped from the baseline
where the unroll is cut, so it learns from the same fixed-length unrolls as V-trace.

    python examples/custom_agent.py --steps 200000
    python examples/custom_agent.py --backend local_mp --logdir runs/reinforce

Its runs work with every command after training, naming the agent by its import path:

    seed-agents eval --agent examples.custom_agent:ReinforceBuilder --logdir runs/reinforce
    python examples/custom_agent.py --backend local_mp --logdir runs/reinforce --resume \
        --steps 400000
"""

from __future__ import annotations

import argparse
import dataclasses

import seed_agents  # noqa: F401 - TF's defaults (seed_agents/__init__.py) before TF's import

# isort: split
import numpy as np
import tensorflow as tf
from dm_env import specs

from builders.base import AgentBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.backends.ray import run_ray
from launch.experiment import Experiment
from seed_agents import core
from seed_agents.learning import UnrollLearner, built, minimize, time_major
from seed_agents.losses import masked_mean
from seed_agents.replay import make_dataset, queue_table, unroll_signature
from seed_agents.replay import unrolls as u
from seed_agents.utils.graph_functions import graph_function


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
        self._step = graph_function(self._tf_step)  # tf.function without AutoGraph

    def _tf_step(self, observation):
        logits = self._net(observation)
        return tf.random.categorical(logits, 1, dtype=tf.int32)[:, 0], logits

    def initial_state(self, batch_size):
        return ()

    def export_step(self):
        """What `seed-agents export` saves (see `core.Policy.export_step`)."""

        def step(observation, prev_action, state):
            action, logits = self._tf_step(observation)
            return action, {"logits": logits}, state

        return step, (self._net,)

    def step(self, observation, prev_action, state, env_ids=None):
        action, logits = self._step(tf.constant(observation))
        return action.numpy(), {"logits": logits.numpy()}, ()


class ReinforceLearner(UnrollLearner):
    """Returns within each unroll, bootstrapped from the baseline where it is cut."""

    def __init__(self, networks: Networks, dataset, batch_size, discount, learning_rate,
                 **kwargs):
        super().__init__(networks, dataset, batch_size, **kwargs)
        self._discount = discount
        self._variables = (networks.policy.trainable_variables
                           + networks.baseline.trainable_variables)
        self._optimizer = built(tf.keras.optimizers.Adam(learning_rate), self._variables)
        self._update = graph_function(self._tf_update)

    def _train(self, data):
        return self._update(data)

    def _tf_update(self, data):
        nets = self._networks
        obs = time_major(data[u.OBSERVATION])  # [T+1, B, obs]
        actions = time_major(data[u.ACTION])[:-1]
        rewards = time_major(data[u.REWARD])[1:]
        discounts = self._discount * time_major(data[u.DISCOUNT])[1:]
        valid = tf.cast(time_major(data[u.STEP_TYPE])[:-1] != 2, tf.float32)  # not LAST
        with tf.GradientTape() as tape:
            logits = tf.map_fn(nets.policy, obs[:-1])
            values = tf.squeeze(tf.map_fn(nets.baseline, obs), -1)
            # Discounted returns, cut at episode ends (valid = 0) and bootstrapped at T.
            returns = tf.scan(
                lambda g, x: x[0] + x[1] * (x[2] * g + (1 - x[2]) * x[3]),
                (rewards, discounts, valid, values[1:]),
                initializer=tf.stop_gradient(values[-1]), reverse=True)
            advantage = tf.stop_gradient(returns) - values[:-1]
            log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(actions, logits)
            pg = masked_mean(-log_prob * tf.stop_gradient(advantage), valid)
            loss = pg + 0.5 * masked_mean(advantage**2, valid)
        norm = minimize(tape, loss, self._variables, self._optimizer, max_norm=None)
        return {"loss": loss, "gradient_norm": norm}

    def checkpoint_objects(self):
        """What a checkpoint holds, so that a run resumes and `eval`/`export` restore it."""
        return {"policy": self._networks.policy, "baseline": self._networks.baseline,
                "optimizer": self._optimizer, "step": self._num_steps}


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
        return ReinforceLearner(networks, dataset, self.batch_size, self.discount,
                                self.learning_rate, counter=counter, logger=logger)


BACKENDS = {"inprocess": run_inprocess, "local_mp": run_local_mp, "ray": run_ray}


def main() -> None:
    parser = argparse.ArgumentParser(description="REINFORCE with a baseline on CartPole.")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="inprocess")
    parser.add_argument("--logdir", default=None, help="logs, run.json and checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    parser.add_argument("--ray-node-ip", default=None,
                        help="ray: the address a local Ray's node binds (default: this host's)")
    args = parser.parse_args()
    experiment = Experiment(ReinforceBuilder(), "gym:CartPole-v1", num_runners=2,
                            envs_per_runner=16, max_env_steps=args.steps, logdir=args.logdir,
                            resume=args.resume)
    extra = {"node_ip_address": args.ray_node_ip} if args.backend == "ray" else {}
    print(BACKENDS[args.backend](experiment, **extra).summary())


if __name__ == "__main__":
    main()
