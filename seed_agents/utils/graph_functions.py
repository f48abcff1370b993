"""`graph_function`: `tf.function` without AutoGraph, for every step this package traces.

AutoGraph rewrites the source of each Python function a `tf.function` calls (the loss, the
V-trace returns, the network's layers, `tree`'s helpers) so that `if` and `for` on tensors
become graph control flow. Our steps never branch on a tensor in Python: their `if`s read
configs and their loops run a known number of times at trace time, and tensor-dependent
control flow is written as graph ops (`tf.where`, `tf.scan`, `tf.while_loop`). So the
rewriting buys nothing and costs most of a learner's start: the V-trace learner's first
step (a test-sized CartPole config) took 7.1 s with it and 2.9-4.6 s without it on a
2-core AVX2 EPYC (the graph and its results are the same), paid again at every restart
and in every test that starts a learner.

Without AutoGraph a Python `if` on a tensor fails at trace time ("using a `tf.Tensor` as a
Python `bool` is not allowed in graph execution"), which is the error a step that needs
graph control flow should get: write it with `tf.cond` or `tf.where`.

`inline=False` is for a function that a traced step calls many times, such as the V-trace
learner's gradient step, called once per minibatch and epoch. Called as a Python method,
the step's body is traced into the graph once per call; as a `tf.function` it is traced
once, but TensorFlow's optimizer inlines every call by default and optimizes each copy.
`atari_ppo_large`'s 32 gradient steps (8 minibatches, 4 epochs), traced per call, took
~70 s to trace and optimize before the first of them ran on the AVX2 EPYC. Left as one
function called 32 times it is traced and optimized once (~4 s); each step ran as fast as
the inlined ones (21.5 s per learner step both ways; 12.4 ms per step of the CartPole
config). `benchmarks/learner_start.py` measures it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf


def graph_function(fn: Callable | None = None, *,
                   input_signature: Sequence[Any] | None = None, inline: bool = True) -> Any:
    """`tf.function(fn, input_signature=..., autograph=False)`; also a decorator. With
    `inline=False`, calls from another traced function stay calls of one function."""
    if fn is None:
        return functools.partial(graph_function, input_signature=input_signature,
                                 inline=inline)
    attributes = None if inline else {"_noinline": True}
    return tf.function(fn, input_signature=input_signature, autograph=False,
                       experimental_attributes=attributes)
