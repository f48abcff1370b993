"""IQL acting: the Gaussian's mean (evaluation) or a sample of it, clipped to [-1, 1]."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.iql.networks import IQLNetworks
from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.specs import EnvironmentSpec


class IQLPolicy(ContinuousPolicy):
    """clip(mean, -1, 1) where deterministic (evaluation), clip(mean + std N(0, 1), -1, 1)
    elsewhere (see `ContinuousPolicy`)."""

    def __init__(self, networks: IQLNetworks, env_spec: EnvironmentSpec,
                 evaluation: bool = False, seed: int | None = None):
        self._networks = networks
        super().__init__(env_spec, 0, evaluation, seed)

    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        mean, stddev = self._networks.actor(observation)
        sampled = mean + stddev * self._rng.normal(tf.shape(mean))
        return tf.clip_by_value(tf.where(deterministic[:, None], mean, sampled), -1.0, 1.0)

    def acting_objects(self) -> tuple:
        return (self._networks.actor,)  # the value, critics and targets stay behind
