"""SAC acting: sample from the tanh-Gaussian, or take its mode where evaluating."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.sac.networks import SACNetworks
from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.specs import EnvironmentSpec


class SACPolicy(ContinuousPolicy):
    """tanh(mean + std * noise) for training environments, tanh(mean) for evaluation ones
    (see `ContinuousPolicy`)."""

    def __init__(self, networks: SACNetworks, env_spec: EnvironmentSpec,
                 num_evaluation_envs: int = 0, evaluation: bool = False,
                 seed: int | None = None):
        self._networks = networks
        super().__init__(env_spec, num_evaluation_envs, evaluation, seed)

    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        mean, log_std = self._networks.policy(observation)
        sampled = tf.tanh(mean + tf.exp(log_std) * self._rng.normal(tf.shape(mean)))
        return tf.where(deterministic[:, None], tf.tanh(mean), sampled)

    def acting_objects(self) -> tuple:
        return (self._networks.actor,)  # the critics, targets and temperature stay behind
