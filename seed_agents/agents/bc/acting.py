"""The behaviour-cloning policy: the most likely action (evaluation) or a sample of the
learned distribution (what the data's behaviour did, noise included)."""

from __future__ import annotations

import tensorflow as tf

from seed_agents.agents.bc.networks import BCNetwork
from seed_agents.policies.feedforward import FeedForwardPolicy
from seed_agents.specs import EnvironmentSpec


class BCPolicy(FeedForwardPolicy):
    """`greedy`: the argmax of the logits, or the Gaussian's mean clipped to [-1, 1];
    otherwise a sample (Gumbel-max over the logits, or mean + std * noise, clipped)."""

    def __init__(self, network: BCNetwork, env_spec: EnvironmentSpec, greedy: bool = False,
                 seed: int | None = None):
        self._network = network
        self._greedy = greedy
        super().__init__(env_spec, seed)

    def _act(self, observation: tf.Tensor) -> tf.Tensor:
        net = self._network
        if net.discrete:
            logits = net.logits(observation)
            if not self._greedy:
                uniform = self._rng.uniform(tf.shape(logits), minval=1e-20, maxval=1.0)
                logits = logits - tf.math.log(-tf.math.log(uniform))
            return tf.argmax(logits, axis=-1)
        mean, log_std = net.gaussian(observation)
        action = mean
        if not self._greedy:
            action = mean + tf.exp(log_std) * self._rng.normal(tf.shape(mean))
        return tf.clip_by_value(action, -1.0, 1.0)
