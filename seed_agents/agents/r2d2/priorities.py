"""Initial priorities of new sequences, computed where they are assembled.

A sequence enters the table with the priority the learner would give it, computed from
the Q-values the acting network produced while acting (stored in the sequence's extras),
with that network also standing in for the target network. This is Ape-X's and SEED's
choice over "the running max priority": it costs a few numpy operations per sequence and
no network call, new sequences are not all replayed first regardless of their content,
and the priority scale matches the learner's from the start. The learner overwrites it
after the sequence's first replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.losses.q_learning import np_n_step_q_targets
from seed_agents.replay import unrolls

_LAST = 2

#: Floor of a priority, so that a sequence with zero error can still be sampled.
MIN_PRIORITY = 1e-6


class InitialPriority:
    """`sequence -> priority`, for `UnrollWriter(priority_fn=...)`; picklable."""

    def __init__(self, config: R2D2Config):
        self._config = config

    def __call__(self, sequence: Mapping[str, Any]) -> float:
        c = self._config
        burn = c.burn_in
        q = sequence[unrolls.EXTRAS]["q_values"][burn:]
        last = sequence[unrolls.STEP_TYPE][burn:] == _LAST
        rewards = sequence[unrolls.REWARD][burn:]
        if c.reward_clip is not None:
            rewards = np.clip(rewards, -c.reward_clip, c.reward_clip)
        targets = np_n_step_q_targets(
            q, rewards, c.discount * sequence[unrolls.DISCOUNT][burn:], last, c.n_step,
            c.value_rescaling_epsilon,
        )
        actions = sequence[unrolls.ACTION][burn:-1].astype(np.int64)
        td = np.abs(targets - q[:-1][np.arange(len(actions)), actions])
        valid = td[~last[:-1]]
        if not valid.size:
            return MIN_PRIORITY
        eta = c.priority_eta
        return max(float(eta * valid.max() + (1.0 - eta) * valid.mean()), MIN_PRIORITY)
