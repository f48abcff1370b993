"""Runners pinned to CPUs: the process and the threads it starts afterwards stay on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builders.vtrace import VTraceBuilder
from launch.experiment import Experiment
from launch.nodes import make_program
from seed_agents.utils.affinity import pin_to_cpu

ROOT = Path(__file__).resolve().parents[1]

_PIN_SCRIPT = """
import os, sys, threading
from seed_agents.utils.affinity import pin_to_cpu
allowed = sorted(os.sched_getaffinity(0))
cpu = pin_to_cpu(int(sys.argv[1]))
seen = []
thread = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
thread.start()
thread.join()
print(cpu, allowed[int(sys.argv[1]) % len(allowed)], sorted(os.sched_getaffinity(0)), seen[0])
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
@pytest.mark.parametrize("index", [0, 1, 5])
def test_a_pinned_process_and_its_later_threads_run_on_one_cpu(index):
    ran = subprocess.run([sys.executable, "-c", _PIN_SCRIPT, str(index)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env={**os.environ,
                                                               "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr
    cpu, expected, process, thread = ran.stdout.split(maxsplit=3)
    assert cpu == expected  # the index-th allowed CPU, modulo their number
    assert process == thread.strip() == f"[{cpu}]"


def test_a_negative_index_is_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        pin_to_cpu(-1)


def test_the_program_pins_runner_i_to_cpu_i_only_when_asked():
    def cpus(experiment):
        return [node.kwargs["cpu"] for node in make_program(experiment).nodes
                if node.group == "runner"]

    builder = VTraceBuilder()
    assert cpus(Experiment(builder, "gym:CartPole-v1", num_runners=3)) == [None] * 3
    assert cpus(Experiment(builder, "gym:CartPole-v1", num_runners=3,
                           pin_runners=True)) == [0, 1, 2]
