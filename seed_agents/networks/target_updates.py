"""Target networks: slow copies of online ones that learners bootstrap from.

R2D2 copies its online network every few thousand steps (tau = 1 on a period); SAC and
D4PG move a little every step (Polyak averaging, tau = 0.005). One function does both, so
the three agents cannot drift apart in how a target follows its source.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def update_target(targets: Sequence[tf.Variable], sources: Sequence[tf.Variable],
                  tau: float = 1.0) -> None:
    """target <- tau * source + (1 - tau) * target, for each pair (tau=1 copies).

    Works eagerly and inside a `tf.function`. The lists must pair up one to one (a
    network and its clone list their variables in the same order).
    """
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}.")
    for target, source in zip(targets, sources, strict=True):
        if tau == 1.0:
            target.assign(source)
        else:
            target.assign(tau * source + (1.0 - tau) * target)
