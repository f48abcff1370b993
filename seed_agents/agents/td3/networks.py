"""TD3's networks: a deterministic actor and twin critics, each with its target copy."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.networks.actor_critic import Critics, DeterministicActor, follow, make_variables


class TD3Networks(tf.Module):
    """Actor, two critics and their targets (equal at the start), and `updates`: the
    learner's update count, which the policy reads to act uniformly at random until the
    first update (a variable of the networks, so checkpoints and a runner's copy carry
    it)."""

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 actor_hidden_sizes: Sequence[int] = (256, 256),
                 critic_hidden_sizes: Sequence[int] = (256, 256), name: str = "td3",
                 layer_norm_mlp: bool = False):
        super().__init__(name=name)
        self.action_size = action_size
        with self.name_scope:
            self.actor = DeterministicActor(actor_hidden_sizes, action_size, "actor",
                                            layer_norm_mlp)
            self.target_actor = DeterministicActor(actor_hidden_sizes, action_size,
                                                   "target_actor", layer_norm_mlp)
            self.critics = Critics(critic_hidden_sizes, 2, "critic", layer_norm_mlp)
            self.target_critics = Critics(critic_hidden_sizes, 2, "target_critic",
                                          layer_norm_mlp)
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        for actor, critics in ((self.actor, self.critics),
                               (self.target_actor, self.target_critics)):
            make_variables(actor, critics, observation_shape, action_size)
        follow(self.target_actor, self.actor)
        follow(self.target_critics, self.critics)
