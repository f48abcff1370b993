"""The local multi-process backend: real processes, real gRPC, real Reverb."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builders.vtrace import VTraceBuilder
from launch.backends.local_mp import NodeFailedError, _Supervisor, run_local_mp
from launch.experiment import Experiment
from launch.program import Node, Program
from seed_agents.agents.vtrace.config import VTraceConfig
from tests.leaks import files_holding

ROOT = Path(__file__).resolve().parents[1]
SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))


def _experiment(logdir: Path, steps: int, **kwargs) -> Experiment:
    settings = dict(num_runners=2, envs_per_runner=4, log_every_s=0.5, evaluate_every_s=0.5)
    settings.update(kwargs)
    return Experiment(builder=VTraceBuilder(SMALL), environment="gym:CartPole-v1",
                      max_env_steps=steps, logdir=str(logdir), **settings)


def _pids(logdir: Path) -> dict[str, int]:
    return json.loads((logdir / "nodes.json").read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; its state in /proc says it is gone.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\tZ" not in status.read_text().split("State:")[1][:4]


def _env_steps(logdir: Path) -> int:
    path = logdir / "train.csv"
    if not path.exists():
        return 0
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return int(float(rows[-1]["env_steps"])) if rows else 0


def _run_in_thread(experiment: Experiment):
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = run_local_mp(experiment, stream=io.StringIO())
        except BaseException as error:  # noqa: BLE001 - checked by the test
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def _wait_for_progress(logdir: Path, steps: int, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _env_steps(logdir) < steps:
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def test_program_runs_as_processes_with_logs_and_evaluation(tmp_path):
    stream = io.StringIO()
    experiment = _experiment(tmp_path, 4_000)
    result = run_local_mp(experiment, stream=stream)
    assert files_holding(tmp_path, experiment.inference_token) == []  # no secret at rest
    assert result.env_steps >= 4_000 and result.learner_steps > 0
    assert "budget" in result.stop_reason
    for node in ("replay", "learner", "runner-0", "runner-1", "evaluator"):
        assert (tmp_path / "logs" / f"{node}.log").exists()
    assert (tmp_path / "learner.csv").exists() and (tmp_path / "train.csv").exists()
    assert "[replay] " in stream.getvalue()
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_a_killed_runner_is_restarted_and_training_continues(tmp_path):
    # No evaluator here: the launcher must still wait for the learner's control service.
    thread, outcome = _run_in_thread(_experiment(tmp_path, 30_000, evaluate_every_s=None))
    _wait_for_progress(tmp_path, 2_000)
    os.kill(_pids(tmp_path)["runner-0"], signal.SIGKILL)
    thread.join(180)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.restarts >= 1
    assert result.env_steps >= 30_000 and "budget" in result.stop_reason
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_a_dead_learner_stops_the_program_with_a_clear_error(tmp_path):
    thread, outcome = _run_in_thread(_experiment(tmp_path, 10**9))
    _wait_for_progress(tmp_path, 1_000)
    os.kill(_pids(tmp_path)["learner"], signal.SIGKILL)
    thread.join(120)
    error = outcome.get("error")
    assert isinstance(error, NodeFailedError)
    assert "learner died" in str(error) and "learner.log" in str(error)
    assert not any(_alive(pid) for pid in _pids(tmp_path).values())


def test_ctrl_c_stops_every_node_within_ten_seconds(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [sys.executable, "-m", "launch.commands.cli", "train", "--backend", "local_mp",
         "--runners", "2", "--envs-per-runner", "4", "--steps", "100000000",
         "--logdir", str(tmp_path), "--set", "unroll_length=5", "--set", "batch_size=4",
         "--set", "queue_size=16"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _wait_for_progress(tmp_path, 1_000)
        pids = _pids(tmp_path)
        process.send_signal(signal.SIGINT)
        start = time.monotonic()
        output, _ = process.communicate(timeout=300)
        assert time.monotonic() - start < 120.0
        assert process.returncode == 130, output[-2000:]
        assert "interrupted" in output
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids.values())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_parent_alone_stops_every_node(tmp_path, signum):
    # Started as a background job of a script is (`nohup ... &`): with SIGINT ignored,
    # which Python then leaves ignored. Only the parent is signalled, not its group.
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        ["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-m", "launch.commands.cli",
         "train", "--backend", "local_mp", "--runners", "1", "--envs-per-runner", "4",
         "--steps", "100000000", "--evaluate-every-s", "0", "--logdir", str(tmp_path),
         "--set", "unroll_length=5", "--set", "batch_size=4", "--set", "queue_size=16"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    pids: dict[str, int] = {}
    try:
        _wait_for_progress(tmp_path, 500)
        pids = _pids(tmp_path)
        os.kill(process.pid, signum)
        deadline = time.monotonic() + 15
        while (process.poll() is None or any(_alive(pid) for pid in pids.values())) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() == 130
        assert not [name for name, pid in pids.items() if _alive(pid)]
    finally:
        for pid in [process.pid, *pids.values()]:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        process.wait()


def _replay_that_stops_in_a_while(context, logdir: str) -> None:
    Path(logdir, "replay-ready").touch()
    context.stop_event.wait()
    time.sleep(0.5)
    Path(logdir, "replay-stopped").touch()


def _learner_deaf_until_the_replay_stops(context, logdir: str) -> None:
    # As the learner is while its main thread waits in a Reverb call that returns only
    # once the replay is gone: its SIGTERM handler cannot run.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(logdir, "learner-ready").touch()
    while not Path(logdir, "replay-stopped").exists():
        time.sleep(0.05)


def test_a_learner_deaf_to_sigterm_leaves_the_replay_time_to_stop(tmp_path):
    kwargs = {"logdir": str(tmp_path)}
    program = Program([
        Node("replay", "replay", _replay_that_stops_in_a_while, kwargs),
        Node("learner", "learner", _learner_deaf_until_the_replay_stops, kwargs),
    ])
    supervisor = _Supervisor(program, tmp_path)
    try:
        supervisor.start_all()
        deadline = time.monotonic() + 600
        while not ((tmp_path / "replay-ready").exists()
                   and (tmp_path / "learner-ready").exists()):
            assert time.monotonic() < deadline, "the nodes did not start"
            time.sleep(0.1)
    finally:
        start = time.monotonic()
        supervisor.stop_all()
    assert time.monotonic() - start < 11
    # The replay stopped on its SIGTERM (not killed when the time was up), which let the
    # learner end by itself.
    assert supervisor.processes["replay"].exitcode == 0
    assert supervisor.processes["learner"].exitcode is not None
    assert supervisor.processes["learner"].exitcode >= 0


@pytest.mark.parametrize("field", ["num_runners"])
def test_local_mp_uses_the_same_experiment_validation(field):
    with pytest.raises(ValueError, match=field):
        Experiment(VTraceBuilder(SMALL), "gym:CartPole-v1", **{field: 0})


# -- a learner or replay that dies comes back from its checkpoint (max_node_restarts) -------


def _has_checkpoint(logdir: Path) -> bool:
    return (logdir / "checkpoints" / "learner" / "checkpoint").exists()


def test_a_killed_learner_and_then_its_replay_come_back_and_the_run_reaches_its_budget(
        tmp_path):
    stream = io.StringIO()
    outcome: dict = {}
    experiment = _experiment(tmp_path, 16_000, checkpoint_every_s=1.0, max_node_restarts=2)

    def target():
        try:
            outcome["result"] = run_local_mp(experiment, stream=stream)
        except BaseException as error:  # noqa: BLE001 - checked by the test
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    try:
        _wait_for_progress(tmp_path, 1_000)
        deadline = time.monotonic() + 600
        while not _has_checkpoint(tmp_path):
            assert time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.2)
        first = _pids(tmp_path)
        os.kill(first["learner"], signal.SIGKILL)
        # Once the new learner trains, the replay goes: it comes back on its address, and
        # the learner (whose dataset reads from it) is stopped and comes back after it.
        while (_pids(tmp_path)["learner"] == first["learner"]
               or "resumed from" not in (tmp_path / "logs" / "learner.log").read_text()):
            assert time.monotonic() < deadline, "the learner did not come back"
            time.sleep(0.2)
        _wait_for_progress(tmp_path, _env_steps(tmp_path) + 1_000)
        second = _pids(tmp_path)
        os.kill(second["replay"], signal.SIGKILL)
    finally:
        thread.join(600)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.env_steps >= 16_000 and "budget" in result.stop_reason
    assert result.restarts >= 3  # the learner, the replay, the learner after it
    said = stream.getvalue()
    (tmp_path / "console.txt").write_text(said)  # what a user sees, kept for a reader
    assert "learner died (exit code -9); restart 1 of 2, from its checkpoint at learner " \
        "step" in said
    assert "replay died (exit code -9); restart 2 of 2: it comes back empty" in said
    last = _pids(tmp_path)
    assert last["learner"] not in (first["learner"], second["learner"])
    assert last["replay"] != second["replay"]
    # Each new learner restored a checkpoint and served the runners on the same address,
    # and the evaluator went on (its death would have ended the run).
    assert (tmp_path / "logs" / "learner.log").read_text().count("resumed from") == 2
    # Every node was stopped or killed; a killed one may still be torn down on busy cores.
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in last.values()):
        assert time.monotonic() < deadline, f"nodes outlived the run: {last}"
        time.sleep(0.2)


def _dies_at_once(context, **kwargs) -> None:
    sys.exit(3)


def test_a_learner_that_keeps_dying_stops_the_run_after_its_restarts(tmp_path):
    experiment = _experiment(tmp_path, 1_000, checkpoint_every_s=1.0, max_node_restarts=2)
    program = Program([Node("learner", "learner", _dies_at_once, {"experiment": experiment})])
    stream = io.StringIO()
    supervisor = _Supervisor(program, tmp_path, max_node_restarts=2, stream=stream)
    try:
        supervisor.start_all()
        deadline = time.monotonic() + 600
        stopped = None
        while stopped is None:
            assert time.monotonic() < deadline, "the supervisor never gave up"
            stopped = supervisor.check()
            time.sleep(0.05)
    finally:
        supervisor.stop_all()
    assert supervisor.restarts == {"learner": 2}
    assert "learner died (exit code" in stopped and "learner.log" in stopped
    assert stream.getvalue().count("no checkpoint yet: it starts from scratch") == 2


def test_max_node_restarts_needs_checkpoints():
    with pytest.raises(ValueError, match="max_node_restarts must be >= 0"):
        Experiment(VTraceBuilder(SMALL), "gym:CartPole-v1", max_node_restarts=-1)
    with pytest.raises(ValueError, match="set checkpoint_every_s"):
        Experiment(VTraceBuilder(SMALL), "gym:CartPole-v1", max_node_restarts=1,
                   checkpoint_every_s=None)


def test_inprocess_refuses_learner_restarts(tmp_path):
    from launch.backends.inprocess import run_inprocess

    experiment = _experiment(tmp_path, 1_000, max_node_restarts=1)
    with pytest.raises(ValueError, match="local_mp and ray backends; inprocess does not"):
        run_inprocess(experiment)
