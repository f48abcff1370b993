"""TensorFlow's thread pools, sized per process (and TF's EagerTensor leak stopped).

Several processes share a small machine's cores; TF's default (one thread per core in each
of two pools, per process) oversubscribes them. Sizes must be set before TF runs its
first op, so call this at process start.

A process that hosts the learner also hosts the central inference server, and the two
run their `tf.function`s concurrently from different Python threads. The inter-op pool is
where a function's ops wait for a thread: with one thread there, the policy's step queued
behind the learner's train step. Measured on a 2-core AVX2 machine, V-trace on Pong
(`benchmarks/atari_throughput.py`, training phase): with 1 inter-op thread the policy took
116 ms per batch, the runners waited and 0.74 cores stood idle (230 env steps/s); with 2,
35 ms per batch, 0.02 cores idle, 458 env steps/s. Hence `LEARNER_INTER_OP_THREADS`.
"""

from __future__ import annotations

import os

LEARNER_INTER_OP_THREADS = 2
"""Inter-op threads of a process running both a learner and an inference server: one per
concurrent TF workload, so that neither waits for the other's ops."""


def configure_tf_threads(intra_op: int | None = None, inter_op: int | None = None) -> None:
    """Sets TF's intra-/inter-op thread counts (default: env SEED_AGENTS_TF_THREADS or 2,
    and 1; learner processes pass `LEARNER_INTER_OP_THREADS`).

    Quietly keeps the current sizes when TF was already initialised in this process.
    Every process that runs TF calls this first, so it also stops TF's per-EagerTensor
    leak there (`seed_agents.utils.eager_tensor_leak`) and caps glibc's arenas at the
    cores it may use (`seed_agents.utils.malloc.limit_arenas`: a week-long learner's
    resident size stays flat), before TF's pools start their threads.
    """
    from seed_agents.utils.malloc import limit_arenas

    limit_arenas()

    import tensorflow as tf

    from seed_agents.utils.eager_tensor_leak import stop_eager_tensor_leak

    stop_eager_tensor_leak()

    intra_op = intra_op or int(os.environ.get("SEED_AGENTS_TF_THREADS", "2"))
    inter_op = inter_op or 1
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        pass
