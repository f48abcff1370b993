"""DQN from the kit: an MLP Q-network, epsilon-greedy acting on a schedule of the run's
env steps, n-step transitions in a uniform rate-limited Reverb table, double-Q targets
with a Huber loss, and a target network copied every `target_update_period` steps.

Everything but the agent's choices is the toolkit's: the environments, the central
inference server, the n-step adder and table (`TransitionAgentBuilder`), the learner's
loop (`TransitionLearner`) and the launcher. docs/agents.md walks through this file.

    python examples/dqn.py --steps 100000
    python examples/dqn.py --backend local_mp --logdir runs/dqn

Its runs work with every command after training, naming the agent by its import path:

    seed-agents eval --agent examples.dqn:DQNBuilder --logdir runs/dqn
    seed-agents train --agent examples.dqn:DQNBuilder --env gym:CartPole-v1 \\
        --set n_step=1 --steps 50000 --logdir runs/dqn1
    python examples/dqn.py --backend local_mp --logdir runs/dqn --resume --steps 200000
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import ClassVar

import seed_agents  # noqa: F401 - TF's defaults (seed_agents/__init__.py) before TF's import

# isort: split
import tensorflow as tf

from builders.transitions import TransitionAgentBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.backends.ray import run_ray
from launch.experiment import Experiment
from seed_agents.configs import TransitionReplayConfig, check_positive, check_sizes
from seed_agents.learning import TransitionLearner, built, minimize
from seed_agents.losses import double_q_targets, huber_td_loss
from seed_agents.networks import QNetwork, update_target
from seed_agents.policies import EpsilonGreedyPolicy, LinearSchedule
from seed_agents.replay import transitions as tr
from seed_agents.utils.graph_functions import graph_function


@dataclasses.dataclass(frozen=True)
class DQNConfig(TransitionReplayConfig):
    """DQN's settings on top of the replay's (`TransitionReplayConfig`).

    hidden_sizes: the Q-network's ReLU layers. learning_rate: Adam's step.
    epsilon_start, epsilon_end, epsilon_steps: exploration moves linearly from start to
      end over the run's first `epsilon_steps` env steps.
    target_update_period: learner steps between copies of the online network.
    huber_delta: where the TD loss turns linear. max_gradient_norm: clipping (None: off).
    """

    n_step: int = 3
    batch_size: int = 128
    samples_per_insert: float = 32.0  # one learner step per 4 env steps
    min_replay_size: int = 1_000
    replay_size: int = 100_000
    hidden_sizes: tuple[int, ...] = (128, 128)
    # Measured on CartPole, 100K env steps, seed 0 (docs/agents.md): 1e-4 with a copy every
    # 500 steps 298; 2.5e-4 with 500: 188, with 250: 138; 5e-4 with 250 collapsed (77).
    learning_rate: float = 1e-4
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_steps: int = 20_000
    target_update_period: int = 500
    huber_delta: float = 1.0
    max_gradient_norm: float | None = 10.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "hidden_sizes", check_sizes(self.hidden_sizes, "hidden_sizes"))
        check_positive(self, "learning_rate", "target_update_period", "huber_delta")
        for name in ("epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")


class DQNNetworks(tf.Module):
    """The online Q-network the policy reads (listed first) and the target copy."""

    def __init__(self, observation_shape, num_actions: int, hidden_sizes):
        super().__init__(name="dqn")
        self.q = QNetwork(observation_shape, num_actions, hidden_sizes, "q")
        self.target_q = QNetwork(observation_shape, num_actions, hidden_sizes, "target_q")
        update_target(self.target_q.variables, self.q.variables)


class DQNLearner(TransitionLearner):
    """y = R + D Q'(o', argmax Q(o')); loss = huber(Q(o, a) - y); Q' <- Q on a period."""

    def __init__(self, networks: DQNNetworks, dataset, config: DQNConfig, **kwargs):
        super().__init__(networks, dataset, config.batch_size, **kwargs)
        self._config = config
        self._optimizer = built(tf.keras.optimizers.Adam(config.learning_rate),
                                networks.q.trainable_variables)
        self._update = graph_function(self._tf_update)  # tf.function without AutoGraph

    def _train(self, data):
        return self._update(data)

    def _tf_update(self, data):
        c, nets = self._config, self._networks
        targets = double_q_targets(data[tr.REWARD], data[tr.DISCOUNT],
                                   nets.q(data[tr.NEXT_OBSERVATION]),
                                   nets.target_q(data[tr.NEXT_OBSERVATION]))
        with tf.GradientTape() as tape:
            q = nets.q(data[tr.OBSERVATION])
            q_taken = tf.gather(q, tf.cast(data[tr.ACTION], tf.int32), batch_dims=1)
            loss = huber_td_loss(q_taken, targets, c.huber_delta)
        norm = minimize(tape, loss, nets.q.trainable_variables, self._optimizer,
                        c.max_gradient_norm)

        def copy_to_target():
            update_target(nets.target_q.variables, nets.q.variables)
            return tf.constant(True)

        # A condition on a tensor is a tf.cond (no AutoGraph to rewrite a Python `if`).
        tf.cond(self.completes(c.target_update_period), copy_to_target,
                lambda: tf.constant(False))
        return {"loss": loss, "mean_q": tf.reduce_mean(q_taken), "gradient_norm": norm}

    def checkpoint_objects(self):
        return {"networks": self._networks, "optimizer": self._optimizer,
                "step": self._num_steps}


@dataclasses.dataclass
class DQNBuilder(TransitionAgentBuilder):
    config: DQNConfig = dataclasses.field(default_factory=DQNConfig)

    agent_name: ClassVar[str] = "DQN"
    discrete_actions: ClassVar[bool] = True

    def make_networks(self, env_spec):
        return DQNNetworks(env_spec.observations.shape, env_spec.num_actions,
                           self.config.hidden_sizes)

    def make_policy(self, networks, env_spec, evaluation=False, seed=None, num_envs=1):
        c = self.config
        return EpsilonGreedyPolicy(
            networks.q, env_spec, LinearSchedule(c.epsilon_start, c.epsilon_end, c.epsilon_steps),
            num_evaluation_envs=c.num_eval_envs, evaluation=evaluation, seed=seed)

    def make_learner(self, networks, replay_address, counter=None, logger=None):
        return DQNLearner(networks, self.make_dataset(replay_address), self.config,
                          counter=counter, logger=logger,
                          samples_per_insert=self.samples_per_insert(replay_address))


BACKENDS = {"inprocess": run_inprocess, "local_mp": run_local_mp, "ray": run_ray}


def main() -> None:
    parser = argparse.ArgumentParser(description="DQN on CartPole, from the kit.")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="inprocess")
    parser.add_argument("--logdir", default=None, help="logs, run.json and checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray-node-ip", default=None,
                        help="ray: the address a local Ray's node binds (default: this host's)")
    args = parser.parse_args()
    builder = DQNBuilder()
    runners, envs_per_runner = builder.default_layout  # one runner of four environments
    experiment = Experiment(builder, "gym:CartPole-v1", num_runners=runners,
                            envs_per_runner=envs_per_runner, max_env_steps=args.steps,
                            logdir=args.logdir, resume=args.resume, seed=args.seed)
    extra = {"node_ip_address": args.ray_node_ip} if args.backend == "ray" else {}
    print(BACKENDS[args.backend](experiment, **extra).summary())


if __name__ == "__main__":
    main()
