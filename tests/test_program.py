"""One program for every backend: the in-process backend runs `make_program`'s nodes."""

from __future__ import annotations

import csv
import io
import sys
import threading
import time

import pytest

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.experiment import Experiment
from launch.nodes import make_program
from seed_agents.agents.vtrace.config import VTraceConfig

SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))


def _stack_functions(thread: threading.Thread) -> list[tuple[str, str]]:
    frame = sys._current_frames().get(thread.ident)
    functions = []
    while frame is not None:
        functions.append((frame.f_code.co_filename, frame.f_code.co_name))
        frame = frame.f_back
    return functions


def test_the_inprocess_backend_runs_the_programs_nodes_as_threads(tmp_path):
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=20",
                            num_runners=2, envs_per_runner=3, max_env_steps=10**9,
                            logdir=str(tmp_path), log_every_s=0.2, evaluate_every_s=0.1)
    names = [node.name for node in make_program(experiment).nodes]
    assert names == ["replay", "learner", "runner-0", "runner-1", "evaluator"]
    stream = io.StringIO()
    results = []
    driver = threading.Thread(target=lambda: results.append(run_inprocess(experiment, stream)))
    driver.start()
    seen: set[str] = set()
    direct = False
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and not (seen >= set(names) and direct
                                                   and "eval return" in stream.getvalue()):
            threads = {t.name: t for t in threading.enumerate()}
            seen |= set(names) & set(threads)
            # A runner thread steps through the inference server itself: its own stack
            # holds the server's channel waiting for its batch (no transport between them).
            if "runner-0" in threads:
                direct |= any(path.endswith("inference/server.py") and name == "receive"
                              for path, name in _stack_functions(threads["runner-0"]))
            time.sleep(0.01)
    finally:
        # Stop it through its own wall limit: the run's time is over once we are done.
        experiment.max_wall_s = 1e-3
        driver.join(600)
    assert not driver.is_alive()
    assert seen == set(names) and direct
    assert "wall-time" in results[0].stop_reason
    with open(tmp_path / "evaluator.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) == {"learner_steps", "env_steps", "eval_return"}
    assert not any(t.name in names for t in threading.enumerate())  # every node stopped


def test_a_failing_node_stops_the_program_and_is_named(tmp_path):
    # A factory that fails in the runners' processes of environments but not in the probe.
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment=_fails_after_probe,
                            num_runners=1, envs_per_runner=2, max_env_steps=10**9,
                            evaluate_every_s=None)
    with pytest.raises(RuntimeError, match="runner-0 failed: ValueError"):
        run_inprocess(experiment, stream=io.StringIO())


def _fails_after_probe(seed: int):
    from seed_agents.envs import make_environment

    if seed != 0:  # the probes use the experiment's seed; runner 0's envs 0 + j
        raise ValueError("no such environment here")
    return make_environment("fake:obs=4", seed)


def test_local_inference_runs_in_process_only(tmp_path):
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4",
                            inference="local", envs_per_runner=1, logdir=str(tmp_path))
    with pytest.raises(ValueError, match="runs in process only"):
        run_local_mp(experiment, stream=io.StringIO())
