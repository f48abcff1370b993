"""A one-second reference measurement of the machine, for every benchmark's JSON line.

Figures from two machines (or two days on a shared one) can only be compared as ratios to
something measured beside them. Two references, each about a second, in a fresh process
with one TensorFlow thread so that neither the benchmark's own thread settings nor its
imports change them:

  * `cartpole_steps_per_s`: raw gymnasium CartPole-v1 steps/s with random actions, one
    core: what plain Python and numpy run at (environments, runners, the server's loop);
  * `nature_cnn_obs_per_s`: the Nature DQN torso (float32, 84x84x4 uint8, batch 64)
    forward passes, as observations/s on one thread: what TensorFlow's kernels run at.

    python -m seed_agents.utils.reference     # prints the JSON object
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from seed_agents.utils.hardware import describe_machine

_TIMEOUT_S = 300.0  # importing TensorFlow on a loaded machine


def measure_cartpole(seconds: float = 1.0) -> float:
    """Raw gymnasium CartPole-v1 steps/s with random actions, in this thread."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 4096).tolist()
    steps, start = 0, time.perf_counter()
    end = start + seconds
    while True:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += len(actions)
        now = time.perf_counter()
        if now >= end:
            break
    env.close()
    return steps / (now - start)


def _nature_cnn_forward():
    """The Nature DQN torso (Mnih et al. 2015) in float32, as a function [B, 84, 84, 4]
    uint8 -> [B, 512]: frames scaled to [0, 1], convolutions 32x8x8 stride 4, 64x4x4
    stride 2 and 64x3x3 stride 1 (valid padding, ReLU; 84 -> 20 -> 9 -> 7), flattened
    (3,136 features), one ReLU layer of 512 units.

    Defined here, not taken from the agents' torsos, so that the reference stays the same
    work per forward pass whatever the project's torsos become; it is the layers the
    agents' "nature_cnn" torso with `hidden_sizes=(512,)` had when it was written.
    """
    import tensorflow as tf

    from seed_agents.utils.graph_functions import graph_function

    layers = [
        tf.keras.layers.Conv2D(32, 8, strides=4, activation="relu",
                               kernel_initializer="he_uniform"),
        tf.keras.layers.Conv2D(64, 4, strides=2, activation="relu",
                               kernel_initializer="he_uniform"),
        tf.keras.layers.Conv2D(64, 3, strides=1, activation="relu",
                               kernel_initializer="he_uniform"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(512, activation="relu"),
    ]

    def forward(frames: tf.Tensor) -> tf.Tensor:
        x = tf.cast(frames, tf.float32) / 255.0
        for layer in layers:
            x = layer(x)
        return x

    return graph_function(forward)


def measure_nature_cnn(seconds: float = 1.0, batch: int = 64) -> float:
    """Nature-CNN float32 forward passes on [batch, 84, 84, 4] uint8, observations/s
    (TensorFlow's thread pools as the process has them)."""
    import numpy as np
    import tensorflow as tf

    forward = _nature_cnn_forward()
    frames = tf.constant(np.random.default_rng(0).integers(0, 256, (batch, 84, 84, 4),
                                                           dtype=np.uint8))
    for _ in range(3):  # trace and warm the kernels
        forward(frames).numpy()
    calls, start = 0, time.perf_counter()
    while True:
        forward(frames).numpy()
        calls += 1
        now = time.perf_counter()
        if now - start >= seconds:
            break
    return calls * batch / (now - start)


def reference_rates(seconds: float = 1.0) -> dict[str, float]:
    """Both references, measured in a fresh process with one TF thread (blocks a few
    seconds); an empty dict, with the reason under "error", if that process fails."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "SEED_AGENTS_TF_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}  # the reference is the CPU's, GPU or not
    try:
        done = subprocess.run(
            [sys.executable, "-m", "seed_agents.utils.reference", "--seconds", str(seconds)],
            capture_output=True, text=True, env=env, timeout=_TIMEOUT_S, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as error:
        return {"error": f"reference measurement failed: {error!r}"}


def machine_report(precision: str | None = None, reference: bool = True) -> dict[str, Any]:
    """The `machine` object for a benchmark's JSON line: `describe_machine(precision)`
    plus, with `reference`, `reference_rates()` under "reference"."""
    report = describe_machine(precision)
    if reference:
        report["reference"] = reference_rates()
    return report


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="One-second reference rates, as JSON.")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)
    rates = {
        "cartpole_steps_per_s": round(measure_cartpole(args.seconds)),
        "nature_cnn_obs_per_s": round(measure_nature_cnn(args.seconds)),
        "threads": 1,
        "seconds": args.seconds,
    }
    print(json.dumps(rates))


if __name__ == "__main__":
    _main()
