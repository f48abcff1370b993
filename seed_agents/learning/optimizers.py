"""Optimizers built with their slots when the learner is made, not at its first step.

A `tf.function` whose first call creates variables is traced twice (TensorFlow traces
again to make sure later calls create none), and Adam makes its slots in its first
`apply_gradients`: unbuilt, every learner's first step paid for two traces (an LSTM
V-trace learner's first step: 16.1 s with two, 9.7 s with one, measured here). Built, a
checkpoint's restore also fills the slots at once and its check that every object
matched covers them.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def built(optimizer: tf.keras.optimizers.Optimizer,
          variables: Sequence[tf.Variable]) -> tf.keras.optimizers.Optimizer:
    """`optimizer`, its slots made for `variables` (the network's trainable variables)."""
    if not variables:
        # An optimizer built over nothing would refuse the real variables later.
        raise ValueError("The network has no variables yet: build it (call it once, e.g. "
                         "on zeros) before its learner is made.")
    optimizer.build(list(variables))
    return optimizer
