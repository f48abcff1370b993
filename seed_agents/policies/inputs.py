"""What every TensorFlow policy's batched step takes and gives back, and its generator."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tree

from seed_agents.specs import EnvironmentSpec


def step_signature(
    env_spec: EnvironmentSpec, state_spec: Any, *extra: tf.TensorSpec
) -> tuple[Any, ...]:
    """The `tf.function` input signature of a policy step over a batch of any size:
    (observation, prev_action, state, *extra). A fixed signature traces once, not once
    per batch size the batcher happens to form."""
    obs, actions = env_spec.observations, env_spec.actions
    return (
        tf.TensorSpec((None, *obs.shape), tf.as_dtype(obs.dtype)),
        tf.TensorSpec((None, *actions.shape), tf.as_dtype(actions.dtype)),
        tree.map_structure(
            lambda s: tf.TensorSpec((None, *s.shape), tf.as_dtype(s.dtype)), state_spec
        ),
        *extra,
    )


def random_generator(seed: int | None) -> tf.random.Generator:
    """A generator of the policy's own: seeded runs repeat, and no op-level seed state."""
    if seed is None:
        return tf.random.Generator.from_non_deterministic_state()
    return tf.random.Generator.from_seed(seed)


def zero_state(state_spec: Any, batch_size: int) -> Any:
    """The initial (all-zero) recurrent state of `batch_size` environments, in numpy."""
    return tree.map_structure(lambda s: np.zeros((batch_size, *s.shape), s.dtype), state_spec)


def to_numpy(outputs: Any) -> Any:
    """A step's (action, extras, next_state) tensors as numpy, for the server's buffers."""
    return tree.map_structure(lambda t: t.numpy(), outputs)


def evaluation_mask(batch_size: int, env_ids: np.ndarray | None, num_evaluation_envs: int,
                    evaluation: bool) -> np.ndarray:
    """[B] bool: the environments of a batch that act without exploring: all of them for
    an evaluation policy, else those with ids below `num_evaluation_envs` (SEED's
    evaluation environments); `env_ids` default to 0..B-1."""
    if evaluation:
        return np.ones(batch_size, bool)
    ids = np.arange(batch_size) if env_ids is None else np.asarray(env_ids)
    return ids < num_evaluation_envs
