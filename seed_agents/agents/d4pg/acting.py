"""D4PG acting: the deterministic policy plus Gaussian exploration noise."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.d4pg.networks import D4PGNetworks
from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.specs import EnvironmentSpec


class D4PGPolicy(ContinuousPolicy):
    """clip(pi(o) + N(0, sigma^2), -1, 1) for training environments, pi(o) for evaluation
    ones (see `ContinuousPolicy`)."""

    def __init__(self, networks: D4PGNetworks, env_spec: EnvironmentSpec, sigma: float = 0.3,
                 num_evaluation_envs: int = 0, evaluation: bool = False,
                 seed: int | None = None):
        self._networks = networks
        self._sigma = sigma
        super().__init__(env_spec, num_evaluation_envs, evaluation, seed)

    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        mean = self._networks.policy(observation)
        noisy = mean + self._sigma * self._rng.normal(tf.shape(mean))
        return tf.where(deterministic[:, None], mean, tf.clip_by_value(noisy, -1.0, 1.0))

    def acting_objects(self) -> tuple:
        return (self._networks.actor,)  # the critic and the targets stay behind
