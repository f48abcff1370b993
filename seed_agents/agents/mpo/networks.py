"""MPO's networks: a Gaussian policy and one critic, each with a target copy, and the duals."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.agents.mpo.config import CRITIC_TYPES
from seed_agents.networks.actor_critic import (
    CategoricalCritic,
    Critics,
    follow,
    make_variables,
)
from seed_agents.networks.gaussian import GaussianActor


class MPONetworks(tf.Module):
    """The policy (`GaussianActor`: `policy(obs)` gives its mean and stddev, [B, d]), its
    target copy, one critic and its target copy (`Critics` of one head, Q(o, a) [B]; or
    with `critic_type="categorical"` a `CategoricalCritic`, logits [B, num_atoms]), and the
    three duals in log space: `log_temperature` [] (the E-step's eta) and
    `log_alpha_mean`, `log_alpha_stddev` (the M-step's multipliers; [d] with
    `per_dim_constraining`, else []). `layer_norm_mlp` makes every network's layers
    Acme's `LayerNormMLP` (`seed_agents.networks.mlp.mlp`).

    Variables are made at construction and the targets start equal to the online
    networks, so the learner's and the policy's `tf.function`s (traced on different
    threads) never create any. The online policy is built first, but `variables` follows
    tf.Module's rule, not construction order: the module's own variables (the duals),
    then its submodules' by attribute name (critic, policy, target_critic,
    target_policy). It is the same on every construction, which is what an evaluator or
    a runner copying `variables` in order relies on. The duals are variables of the
    networks, so checkpoints carry them.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        actor_hidden_sizes: Sequence[int] = (256, 256),
        critic_hidden_sizes: Sequence[int] = (256, 256),
        init_scale: float = 0.7,
        min_scale: float = 1e-6,
        init_log_temperature: float = 10.0,
        init_log_alpha_mean: float = 10.0,
        init_log_alpha_stddev: float = 1000.0,
        per_dim_constraining: bool = True,
        critic_type: str = "nondistributional",
        num_atoms: int = 51,
        v_min: float = -150.0,
        v_max: float = 150.0,
        layer_norm_mlp: bool = False,
        name: str = "mpo",
    ):
        super().__init__(name=name)
        self.action_size = action_size
        if critic_type not in CRITIC_TYPES:
            raise ValueError(f"critic_type must be one of {', '.join(CRITIC_TYPES)}, "
                             f"got {critic_type!r}.")
        self.distributional = critic_type == "categorical"
        dual_shape = [action_size] if per_dim_constraining else []
        with self.name_scope:
            self.policy, self.target_policy = (
                GaussianActor(actor_hidden_sizes, action_size, init_scale, min_scale, name,
                              layer_norm_mlp)
                for name in ("policy", "target_policy"))
            self.critic, self.target_critic = (
                CategoricalCritic(critic_hidden_sizes, num_atoms, v_min, v_max, name,
                                  layer_norm_mlp)
                if self.distributional else Critics(critic_hidden_sizes, 1, name, layer_norm_mlp)
                for name in ("critic", "target_critic"))
            self.log_temperature = tf.Variable(float(init_log_temperature), dtype=tf.float32,
                                               name="log_temperature")
            self.log_alpha_mean = tf.Variable(tf.fill(dual_shape, float(init_log_alpha_mean)),
                                              name="log_alpha_mean")
            self.log_alpha_stddev = tf.Variable(
                tf.fill(dual_shape, float(init_log_alpha_stddev)), name="log_alpha_stddev")
        for policy, critic in ((self.policy, self.critic),
                               (self.target_policy, self.target_critic)):
            make_variables(policy, critic, observation_shape, action_size)
        follow(self.target_policy, self.policy)
        follow(self.target_critic, self.critic)

    @property
    def dual_variables(self) -> list[tf.Variable]:
        """[log_temperature, log_alpha_mean, log_alpha_stddev]: what the dual step moves."""
        return [self.log_temperature, self.log_alpha_mean, self.log_alpha_stddev]
