"""What a frame costs and what a learner computes: `seed_agents.utils.cost` (core-seconds
and dollars per million frames, the CPU of a run's processes) and
`seed_agents.utils.flops` (FLOPs counted from a graph's shapes, a matmul's GFLOP/s)."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import tensorflow as tf

from seed_agents.utils.cost import (
    USD_PER_VCPU_HOUR,
    core_seconds_per_million_frames,
    process_tree_cpu_s,
    usd,
)
from seed_agents.utils.flops import float_operations, matmul_gflops


def test_core_seconds_and_dollars_per_million_frames():
    # 1 ms of CPU per agent step of 4 frames: 250,000 steps, 250 core-seconds.
    assert core_seconds_per_million_frames(1.0, 4) == pytest.approx(250.0)
    assert usd(3600.0, 0.05) == pytest.approx(0.05)
    assert usd(250.0) == pytest.approx(250.0 / 3600.0 * USD_PER_VCPU_HOUR)
    with pytest.raises(ValueError, match="frames_per_step"):
        core_seconds_per_million_frames(1.0, 0)
    with pytest.raises(ValueError, match="usd_per_vcpu_hour"):
        usd(1.0, -1.0)


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_process_tree_cpu_counts_a_finished_child():
    before = process_tree_cpu_s()
    child = multiprocessing.get_context("spawn").Process(target=_spin, args=(0.5,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert process_tree_cpu_s() - before >= 0.45  # the child's half second, reaped


def test_float_operations_count_a_dense_layer_and_its_gradient_from_shapes():
    layer = tf.keras.layers.Dense(7)
    layer.build((None, 5))
    spec = [tf.TensorSpec([3, 5], tf.float32)]
    forward = float_operations(layer, spec)
    # MatMul: 2 x 3 x 5 x 7 = 210; BiasAdd: 3 x 7 = 21.
    assert forward == 231

    def gradient(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x))
        return loss, tape.gradient(loss, layer.trainable_variables)

    # The forward pass (231) and the kernel's gradient, one more matmul (x^T dy, 210); the
    # input's is not taken. Only what the outputs need is counted (the graph is pruned).
    assert 231 + 210 <= float_operations(gradient, spec) < 231 + 2 * 210
    with pytest.raises(ValueError, match="static shapes"):
        float_operations(layer, [tf.TensorSpec([None, 5], tf.float32)])


def test_matmul_gflops_is_a_rate():
    rate = matmul_gflops(tf.float32, size=128, duration_s=0.2)
    assert 0.01 < rate < 1e6  # GFLOP/s of any CPU
    with pytest.raises(ValueError):
        matmul_gflops(tf.float32, size=0)
