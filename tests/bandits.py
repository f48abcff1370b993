"""A continuous bandit as a dataset of transitions: what the continuous learners' tests
(SAC, D4PG, TD3, MPO, IQL) train on to show they find, or prefer, the best action."""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf

from seed_agents.replay import transitions as tr


def bandit_dataset(batch: int = 64, peak: float = 0.25, size: int = 4096) -> tf.data.Dataset:
    """One-step transitions (discount 0) of uniformly random actions in [-1, 1]^2 at a
    zero observation, rewarded -||a - peak||^2: the best action is `peak` in every entry.
    Batches of `batch`, shuffled with a fixed seed, as `Batches` hands them (`.data`)."""
    rng = np.random.default_rng(0)
    action = rng.uniform(-1, 1, (size, 2)).astype(np.float32)
    data = {
        tr.OBSERVATION: np.zeros((size, 2), np.float32),
        tr.ACTION: action,
        tr.REWARD: (-np.sum((action - peak) ** 2, -1)).astype(np.float32),
        tr.DISCOUNT: np.zeros(size, np.float32),
        tr.NEXT_OBSERVATION: np.zeros((size, 2), np.float32),
        tr.EXTRAS: {},
    }
    sample = collections.namedtuple("Sample", "data")
    return (tf.data.Dataset.from_tensor_slices(data).shuffle(size, seed=0).repeat()
            .batch(batch).map(sample))
