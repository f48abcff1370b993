"""Arithmetic of a TensorFlow computation, counted from its graph's shapes, and the CPU's
own matrix-multiply rate: how far a learner is from what the machine can compute.

`float_operations` counts what TensorFlow's profiler registers a cost for (convolutions
and their gradients, matrix products, bias adds and a few element-wise ops) in a function
traced at fixed shapes: 2 per multiply-add, as FLOP counts are quoted. It counts what the
graph holds, not what a run executes, so it is traced at the shapes training uses.

`matmul_gflops` times a large square matmul at a given precision with the calling
process's TensorFlow threads: the rate this CPU reaches on the best case of dense
arithmetic (oneDNN's GEMM), which a network's step (smaller matrices, convolutions,
memory-bound element-wise ops) approaches but does not pass. Their ratio is a learner's
share of the machine's peak (`atari_throughput.py`'s `learner_vs_peak`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from seed_agents.utils.graph_functions import graph_function


def float_operations(fn: Callable[..., Any], input_specs: Sequence[tf.TensorSpec]) -> int:
    """FLOPs of one call of `fn` at `input_specs` (static shapes), gradients included where
    `fn` takes them: its graph is traced, variables frozen into constants (so that nested
    functions are inlined and every op has its shapes), and TF's profiler sums the ops'
    registered costs. Raises ValueError for a spec without a fully known shape."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    for spec in input_specs:
        if not spec.shape.is_fully_defined():
            raise ValueError(f"float_operations needs static shapes, got {spec}.")
    concrete = graph_function(fn).get_concrete_function(*input_specs)
    frozen = convert_variables_to_constants_v2(concrete)
    from tensorflow.python.util import deprecation

    # The profiler is TF1's: silence its deprecation notices, not the result.
    with tf.Graph().as_default() as graph, deprecation.silence():
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
        options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        stats = tf.compat.v1.profiler.profile(graph, options=options)
    return int(stats.total_float_ops)


def matmul_gflops(dtype: tf.DType = tf.float32, size: int = 2048,
                  duration_s: float = 3.0) -> float:
    """GFLOP/s of a [size, size] x [size, size] matmul in `dtype`, called back to back for
    `duration_s` after one warm-up call, with this process's TF thread pools."""
    if size < 1 or duration_s <= 0:
        raise ValueError(f"size must be >= 1 and duration_s > 0, got {size}, {duration_s}.")
    a = tf.cast(tf.random.stateless_uniform([size, size], seed=[0, 1]), dtype)
    b = tf.cast(tf.random.stateless_uniform([size, size], seed=[2, 3]), dtype)
    # One element back: the product is computed whole (no graph rewrite slices a matmul),
    # and copying it out would add time that is not arithmetic.
    product = graph_function(lambda x, y: tf.matmul(x, y)[-1, -1])
    product(a, b).numpy()  # Traces, and oneDNN picks its kernel.
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < duration_s or calls == 0:
        product(a, b).numpy()  # .numpy(): each call finished before the next is timed.
        calls += 1
    return 2.0 * size ** 3 * calls / elapsed / 1e9
