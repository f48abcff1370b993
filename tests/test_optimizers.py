"""Optimizers built when the learner is made: its first step is traced once, not twice."""

from __future__ import annotations

import pytest
import tensorflow as tf

from seed_agents.learning.optimizers import built


def _first_call_traces(optimizer: tf.keras.optimizers.Optimizer, layer) -> int:
    @tf.function
    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) ** 2)
        variables = layer.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    train(tf.ones([2, 3]))
    return train.experimental_get_tracing_count()


def _layer() -> tf.keras.layers.Dense:
    layer = tf.keras.layers.Dense(4)
    layer(tf.zeros([1, 3]))
    return layer


def test_a_built_optimizer_makes_the_first_step_trace_once():
    # Unbuilt, Adam creates its slots inside the first call, and TF traces it again.
    assert _first_call_traces(tf.keras.optimizers.Adam(), _layer()) == 2
    layer = _layer()
    assert _first_call_traces(built(tf.keras.optimizers.Adam(), layer.trainable_variables),
                              layer) == 1


def test_an_optimizer_over_no_variables_is_refused():
    with pytest.raises(ValueError, match="no variables yet"):
        built(tf.keras.optimizers.Adam(), tf.keras.layers.Dense(4).trainable_variables)
