"""What a carried partial batch costs a learner: `Batches.next()` with and without rows
waiting from an earlier partial batch.

    python benchmarks/batch_carry.py [--batch 240] [--shape 33,84,84,4] [--batches 20]

`make_dataset` keeps the partial batch that comes before a sampling timeout, and
`Batches` carries its rows into the next batch (see `seed_agents.learning.batches`).
While rows are carried, every batch is assembled by one concatenation: a copy of the
batch that a full batch passing straight through does not make. This measures that copy
on batches shaped like `atari_ppo_large`'s (240 unrolls of 33 stacked 84x84x4 frames,
uint8) from an in-memory dataset: seconds per batch with one row carried (`value`)
against full batches alone (`baseline`), to set beside the learner's step time.
Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=240)
    parser.add_argument("--shape", default="33,84,84,4", help="one row's shape (uint8)")
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from seed_agents.learning.batches import Batches
    from seed_agents.utils.reference import machine_report
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(2, 1)
    shape = tuple(int(n) for n in args.shape.split(","))
    full = tf.constant(np.random.default_rng(0).integers(0, 255, (args.batch, *shape),
                                                         dtype=np.uint8))

    def seconds_per_batch(dataset: tf.data.Dataset) -> float:
        batches = Batches(dataset, args.batch)
        for _ in range(2):  # warm-up; the first carries the partial row, if any
            batches.next()
        start = time.perf_counter()
        for _ in range(args.batches):
            batches.next()
        elapsed = (time.perf_counter() - start) / args.batches
        batches.close()
        return elapsed

    passing = tf.data.Dataset.from_tensors(full).repeat()
    carrying = tf.data.Dataset.from_tensors(full[:1]).concatenate(passing)
    baseline = seconds_per_batch(passing)
    value = seconds_per_batch(carrying)
    print(json.dumps({
        "bench": "batch_carry",
        "value": round(value, 5),
        "unit": "seconds per batch from Batches.next(), one row carried",
        "baseline": round(baseline, 5),
        "baseline_kind": "the same batches passing through with nothing carried",
        "ratio": round(value / baseline, 2) if baseline > 0 else None,
        "extra_ms_per_batch": round(1000 * (value - baseline), 2),
        "batch_mib": round(full.numpy().nbytes / 2**20, 1),
        "batches": args.batches,
        "machine": machine_report(),
    }))


if __name__ == "__main__":
    main()
