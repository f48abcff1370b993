"""MPO acting: sample the Gaussian policy, or take its mean where evaluating; both clipped."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.mpo.networks import MPONetworks
from seed_agents.policies.continuous import ContinuousPolicy
from seed_agents.specs import EnvironmentSpec


class MPOPolicy(ContinuousPolicy):
    """clip(mean + stddev * N(0, 1), -1, 1) for training environments, clip(mean, -1, 1)
    for evaluation ones (see `ContinuousPolicy`). The policy's mean is unbounded, so both
    clip; the learner's critic sees actions clipped the same way. Acme's behaviour policy
    samples the same Gaussian, its evaluator takes the mean, clipped to the spec."""

    def __init__(self, networks: MPONetworks, env_spec: EnvironmentSpec,
                 num_evaluation_envs: int = 0, evaluation: bool = False,
                 seed: int | None = None):
        self._networks = networks
        super().__init__(env_spec, num_evaluation_envs, evaluation, seed)

    def _act(self, observation: tf.Tensor, deterministic: tf.Tensor) -> tf.Tensor:
        mean, stddev = self._networks.policy(observation)
        sampled = mean + stddev * self._rng.normal(tf.shape(mean))
        return tf.clip_by_value(tf.where(deterministic[:, None], mean, sampled), -1.0, 1.0)

    def acting_objects(self) -> tuple:
        return (self._networks.policy,)  # the critic, the targets and the duals stay behind
