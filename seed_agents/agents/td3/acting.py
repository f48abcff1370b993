"""TD3 acting: the deterministic action plus Gaussian noise, uniform until learning starts."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.td3.networks import TD3Networks
from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.specs import EnvironmentSpec


class TD3Policy(ContinuousPolicy):
    """Training environments: uniform actions in [-1, 1]^d until the learner's first
    update (the networks' `updates` is 0), then clip(pi(o) + N(0, sigma^2), -1, 1);
    evaluation environments: pi(o) (see `ContinuousPolicy`)."""

    def __init__(self, networks: TD3Networks, env_spec: EnvironmentSpec, sigma: float = 0.1,
                 num_evaluation_envs: int = 0, evaluation: bool = False,
                 seed: int | None = None):
        self._networks = networks
        self._sigma = sigma
        super().__init__(env_spec, num_evaluation_envs, evaluation, seed)

    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        mean = self._networks.actor(observation)
        explore = tf.cond(
            self._networks.updates > 0,
            lambda: tf.clip_by_value(mean + self._sigma * self._rng.normal(tf.shape(mean)),
                                     -1.0, 1.0),
            lambda: self._rng.uniform(tf.shape(mean), -1.0, 1.0))
        return tf.where(deterministic[:, None], mean, explore)

    def acting_objects(self) -> tuple:
        # The actor, and the update count the warm-up reads; critics and targets stay behind.
        return (self._networks.actor, self._networks.updates)
