"""Actors and critics of continuous-action agents, and the target copies they learn from.

What TD3 (and a user's own deterministic-policy agent) composes: a tanh actor, a set of
critics Q_i(s, a) (or one `CategoricalCritic` of returns, as distributional MPO), each
with a target copy that starts equal and follows by Polyak averaging
(`seed_agents.networks.target_updates`). Keras layers make their variables on
the first call, and a target copy must copy variables that exist: `make_variables` calls
a module once on zeros, which the networks' constructor does before the first copy (and
before the learner's and the policy's `tf.function`s, traced on other threads, could make
any).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from seed_agents.configs.transitions import check_support
from seed_agents.losses.distributional import expected_value
from seed_agents.networks.mlp import critic_input, flatten_observation, mlp, run
from seed_agents.networks.target_updates import update_target


class DeterministicActor(tf.Module):
    """pi(o) in [-1, 1]^d: MLP layers (`mlp`'s, ReLU unless `layer_norm`), then a tanh
    layer of `action_size` units."""

    def __init__(self, hidden_sizes: Sequence[int], action_size: int, name: str = "actor",
                 layer_norm: bool = False):
        super().__init__(name=name)
        with self.name_scope:
            self.layers = [*mlp(hidden_sizes, name, layer_norm),
                           tf.keras.layers.Dense(action_size, activation="tanh",
                                                 name=f"{name}_out")]

    def __call__(self, observation: tf.Tensor) -> tf.Tensor:
        return run(self.layers, flatten_observation(observation))

    @property
    def weights(self) -> list[tf.Variable]:
        """Its variables in layer order (a copy of it lists them in the same order)."""
        return [v for layer in self.layers for v in layer.trainable_variables]


class Critics(tf.Module):
    """`count` independent critics Q_i(o, a), each MLP layers (`mlp`'s, ReLU unless
    `layer_norm`) and one linear unit; the call returns each critic's [B] values (TD3 and
    SAC take the smaller of two)."""

    def __init__(self, hidden_sizes: Sequence[int], count: int = 2, name: str = "critic",
                 layer_norm: bool = False):
        super().__init__(name=name)
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}.")
        with self.name_scope:
            self.heads = [[*mlp(hidden_sizes, f"{name}_{i}", layer_norm),
                           tf.keras.layers.Dense(1, name=f"{name}_{i}_out")]
                          for i in range(count)]

    def __call__(self, observation: tf.Tensor, action: tf.Tensor) -> tuple[tf.Tensor, ...]:
        x = critic_input(observation, action)
        return tuple(tf.squeeze(run(head, x), -1) for head in self.heads)

    @property
    def weights(self) -> list[tf.Variable]:
        return [v for head in self.heads for layer in head for v in layer.trainable_variables]


class CategoricalCritic(tf.Module):
    """One distributional critic Z(o, a): MLP layers (`mlp`'s, ReLU unless `layer_norm`)
    and `num_atoms` logits over `support`,
    `num_atoms` returns evenly spaced on [v_min, v_max] (D4PG's and DMPO's 51 on [-150,
    150]); the call returns the logits [B, num_atoms]. Train it with
    `seed_agents.losses.distributional` (projection, cross-entropy); `q_value` is E[Z]."""

    def __init__(self, hidden_sizes: Sequence[int], num_atoms: int = 51,
                 v_min: float = -150.0, v_max: float = 150.0, name: str = "critic",
                 layer_norm: bool = False):
        super().__init__(name=name)
        check_support(num_atoms, v_min, v_max)
        self.support = tf.linspace(float(v_min), float(v_max), num_atoms)
        with self.name_scope:
            self.layers = [*mlp(hidden_sizes, name, layer_norm),
                           tf.keras.layers.Dense(num_atoms, name=f"{name}_out")]

    def __call__(self, observation: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
        return run(self.layers, critic_input(observation, action))

    def q_value(self, logits: tf.Tensor) -> tf.Tensor:
        """E[Z] of the call's logits, [...]."""
        return expected_value(logits, self.support)

    @property
    def weights(self) -> list[tf.Variable]:
        return [v for layer in self.layers for v in layer.trainable_variables]


def make_variables(actor: DeterministicActor | None,
                   critics: Critics | CategoricalCritic | None,
                   observation_shape: Sequence[int], action_size: int) -> None:
    """Calls the modules once on a batch of zeros, so that their variables exist."""
    observation = tf.zeros([1, *observation_shape])
    if actor is not None:
        actor(observation)
    if critics is not None:
        critics(observation, tf.zeros([1, action_size]))


def follow(target: tf.Module, online: tf.Module, tau: float = 1.0) -> None:
    """target <- tau online + (1 - tau) target over the modules' `weights` (tau 1 copies)."""
    update_target(target.weights, online.weights, tau)
