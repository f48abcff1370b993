"""TF 2.14's per-EagerTensor leak on Python 3.11, stopped (seed_agents.utils.eager_tensor_leak)."""

from __future__ import annotations

import gc
import sys
import tracemalloc
import weakref

import numpy as np
import pytest
import tensorflow as tf

from seed_agents.utils.eager_tensor_leak import stop_eager_tensor_leak

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                                reason="the leak and its fix are CPython 3.11's")


def test_the_patch_applies_once_and_tensors_keep_working():
    assert stop_eager_tensor_leak() and stop_eager_tensor_leak()  # conftest applied it
    a = tf.constant([1.0, 2.0])
    b = a * 2 + tf.ones(2)
    np.testing.assert_array_equal(b.numpy(), [3.0, 5.0])
    b.note = "an attribute"  # a managed dict without inline values makes a dict
    assert b.note == "an attribute" and not hasattr(a, "note")
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None
    step = tf.function(lambda x: (x + 1, tf.shape(x)),
                       input_signature=[tf.TensorSpec((None,), tf.float32)])
    out, shape = step(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
    assert shape.numpy().tolist() == [3]


def test_dropped_eager_tensors_leave_no_memory_behind():
    # Unpatched, each tensor left its inline values array behind: 320 KB for these here.
    batch = np.zeros((16, 4), np.float32)
    for _ in range(1_000):
        tf.constant(batch)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            tf.constant(batch)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 100_000, f"{grown} bytes stayed behind 20,000 dropped tensors"
