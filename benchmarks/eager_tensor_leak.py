"""What TensorFlow itself leaks per EagerTensor on this Python, and per policy step.

    python benchmarks/eager_tensor_leak.py [--count 300000]

TensorFlow 2.14's `EagerTensor` subclasses a Python class, so on Python 3.11 it inherits
a managed `__dict__` whose inline values CPython allocates with each instance; the type's
own deallocator (`EagerTensor_dealloc`) frees its own attribute dict but not those values,
so every EagerTensor ever created leaves a few dozen bytes behind. A learner that serves
inference makes several per batch (the inputs converted, the outputs returned), which is
the learner's RSS growth that `benchmarks/soak.py` measures. The project pins TF 2.14.1
(dm-reverb 0.14.0 is built against it) and Python 3.11, so this is measured here, to be
checked again whenever either changes.

Prints bytes of RSS per EagerTensor made and dropped with the leak stopped
(`seed_agents.utils.eager_tensor_leak`, `value`) against the same measured first in the
same process without it (`baseline`), the bytes per `step` of the V-trace policy the
inference server calls once per batch (before, after), and a plain Python object's for
reference. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def bytes_per_call(make, count: int) -> float:
    """RSS growth per call of `make` (whose result is dropped), after a warm-up."""
    for _ in range(count // 10):
        make()
    before = rss_bytes()
    for _ in range(count):
        make()
    return (rss_bytes() - before) / count


class _Plain:
    def __init__(self):
        self.value = 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300_000)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from builders.vtrace import VTraceBuilder
    from launch.experiment import Experiment
    from seed_agents.utils.eager_tensor_leak import stop_eager_tensor_leak
    from seed_agents.utils.reference import machine_report

    # Not configure_tf_threads: it would stop the leak before the baseline is measured.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    batch = np.zeros((16, 4), np.float32)
    experiment = Experiment(VTraceBuilder(), "gym:CartPole-v1")
    spec = experiment.environment_spec()
    policy = experiment.builder.make_policy(experiment.builder.make_networks(spec), spec,
                                            evaluation=False, seed=0, num_envs=16)
    prev_action = np.zeros((16,), np.int64)
    state = policy.initial_state(16)

    def measure() -> tuple[float, float]:
        return (bytes_per_call(lambda: tf.constant(batch), args.count),
                bytes_per_call(lambda: policy.step(batch, prev_action, state),
                               max(args.count // 10, 1000)))

    plain = bytes_per_call(_Plain, args.count)
    eager_type = type(tf.constant(0.0))
    managed_dict = bool(eager_type.__flags__ & (1 << 4))
    tensor_before, step_before = measure()
    patched = stop_eager_tensor_leak()
    tensor_after, step_after = measure()
    print(json.dumps({
        "bench": "eager_tensor_leak",
        "value": round(tensor_after, 1),
        "unit": "bytes of RSS per EagerTensor made and dropped, leak stopped",
        "baseline": round(tensor_before, 1),
        "baseline_kind": "the same before stop_eager_tensor_leak, in this process",
        "ratio": round(tensor_after / tensor_before, 3) if tensor_before > 0 else None,
        "policy_step_bytes_before_after": [round(step_before, 1), round(step_after, 1)],
        "plain_object_bytes": round(plain, 1),
        "eager_tensor_has_managed_dict": managed_dict,
        "patched": patched,
        "count": args.count,
        "machine": machine_report(),
    }))


if __name__ == "__main__":
    main()
