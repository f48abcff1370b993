"""`benchmarks/cluster_sim.py`'s arithmetic (the projection from CPU per step) and the
harness's simulated network (`atari_phases._DelayedChannel`): a delay each way and a
link's serialization time, and the payload it charges for."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from seed_agents.inference.protocol import MID, StepBatch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def cluster_sim():
    sys.path.insert(0, str(BENCHMARKS))  # its sibling module, atari_phases
    try:
        spec = importlib.util.spec_from_file_location("cluster_sim", BENCHMARKS / "cluster_sim.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _row(steps_per_s: float, serving: float, runner: float) -> dict[str, float]:
    return {"steps_per_s": steps_per_s, "server_cpu_ms_per_step": serving,
            "runner_cpu_ms_per_step": runner, "bytes_per_frame_up": 1768.0,
            "bytes_per_frame_down": 2.0, "mean_batch": 64.0, "rtt_ms": 50.0,
            "rtt_p99_ms": 70.0, "idle_cores": 0.1}


def test_the_projection_follows_from_the_cpu_per_step(cluster_sim, monkeypatch):
    monkeypatch.setattr("seed_agents.utils.reference.machine_report",
                        lambda precision: {"precision": precision})
    args = argparse.Namespace(envs_per_runner=4, runner_cores=4, learner_cores=16,
                              delay_ms=0.25, bandwidth_mbit=1000.0, preset="atari_ppo",
                              duration=20.0, warmup=5.0, max_wait_ms=2.0)
    config = argparse.Namespace(precision="auto")
    clusters = {1: _row(700.0, 0.9, 0.5), 32: _row(2000.0, 0.25, 0.5)}
    report = cluster_sim._report(args, config, {"cpu_ms_per_step": 0.27},
                                 {"cpu_ms_per_step": 1.75}, clusters, _row(2500.0, 0.25, 0.5))
    assert report["value"] == 8000 and report["baseline"] == 10000 and report["ratio"] == 0.8
    assert report["serving_share"] == 0.125  # 0.25 / (0.25 + 1.75)
    # A serving core: 4,000 env steps/s; a 4-core runner machine: 8,000.
    assert report["runner_machines_per_learner_core"] == 0.5
    projection = report["projection"]
    assert projection["learner_machine_frames_per_s"] == 32000  # 16 cores / 2 ms x 4
    assert projection["runner_machines"] == 1.0
    assert projection["learner_network_mbit_per_s"] == pytest.approx(
        32000 * 1770 * 8 / 1e6, abs=0.1)
    assert set(report["clusters"]) == {"1", "32"}


def test_the_simulated_link_delays_each_way_and_charges_the_payload(cluster_sim):
    import atari_phases

    batch = StepBatch(np.zeros((4, 84, 84, 1), np.uint8), np.zeros(4, np.float32),
                      np.ones(4, np.float32), np.full(4, MID, np.uint8))
    assert atari_phases._payload_bytes(batch) == 4 * 84 * 84 + 4 * 4 + 4 * 4 + 4
    assert atari_phases._payload_bytes(np.zeros(4, np.int32)) == 16

    class Echo:
        def send(self, message):
            self.message = message

        def receive(self):
            return np.zeros(4, np.int32)

    # 28,276 bytes at 1 Mbit/s: 0.226 s on the link, plus 10 ms each way.
    channel = atari_phases._DelayedChannel(Echo(), 0.01, 1e6 / 8)
    try:
        start = time.monotonic()
        channel.send(batch)
        assert channel.receive().shape == (4,)
        assert time.monotonic() - start >= 0.02 + 28_276 * 8 / 1e6
    finally:
        channel.close()
