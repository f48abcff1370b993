"""TensorFlow's thread pools, sized per process.

Several processes share a small machine's cores; TF's default (one thread per core in each
of two pools, per process) oversubscribes them. Sizes must be set before TF runs its
first op, so call this at process start.
"""

from __future__ import annotations

import os


def configure_tf_threads(intra_op: int | None = None, inter_op: int | None = None) -> None:
    """Sets TF's intra-/inter-op thread counts (default: env SEED_AGENTS_TF_THREADS or 2, 1).

    Quietly keeps the current sizes when TF was already initialised in this process.
    """
    import tensorflow as tf

    intra_op = intra_op or int(os.environ.get("SEED_AGENTS_TF_THREADS", "2"))
    inter_op = inter_op or 1
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        pass
