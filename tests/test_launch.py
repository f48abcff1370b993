"""The in-process backend, the command line and the examples, run briefly for real."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import reverb

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.commands import cli
from launch.experiment import Experiment
from launch.nodes import make_program, start_replay
from seed_agents.agents.vtrace.config import VTraceConfig

ROOT = Path(__file__).resolve().parents[1]
SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("inference,envs_per_runner", [("central", 4), ("local", 1)])
def test_inprocess_run_acts_learns_and_logs(tmp_path, inference, envs_per_runner):
    experiment = Experiment(
        builder=VTraceBuilder(SMALL),
        environment="gym:CartPole-v1",
        num_runners=2,
        envs_per_runner=envs_per_runner,
        max_env_steps=3_000,
        inference=inference,
        logdir=str(tmp_path),
        log_every_s=0.2,
    )
    result = run_inprocess(experiment)
    assert result.env_steps >= 3_000
    assert result.episodes > 0
    assert result.learner_steps > 0
    assert "budget" in result.stop_reason
    with open(tmp_path / "train.csv") as f:
        rows = list(csv.DictReader(f))
    assert int(rows[-1]["env_steps"]) >= 3_000
    assert (tmp_path / "learner.csv").exists()
    assert "logs: " + str(tmp_path) in result.summary()
    # The summary counts the learner's steps up to its last save, not to the last progress
    # reading (the learner steps on until it is stopped).
    final = json.loads((tmp_path / "checkpoints" / "learner" / "final.json").read_text())
    assert final["saved"] and result.learner_steps == final["step"]
    # The progress rows carry the learner's feature health once it has stepped. The
    # learner counts a step before it logs the step's row, so a row polled between the
    # two reads NaN: allowed only before the first logged figure, never after it.
    health = [float(row["live_features"]) for row in rows if int(row["learner_steps"]) > 0]
    logged = [i for i, value in enumerate(health) if value == value]
    assert logged, health
    assert all(0.0 < value <= 1.0 for value in health[logged[0]:]), health


def test_runner_processes_train_through_grpc(tmp_path):
    experiment = Experiment(
        builder=VTraceBuilder(SMALL),
        environment="gym:CartPole-v1",
        num_runners=2,
        envs_per_runner=4,
        max_env_steps=3_000,
        transport="grpc",
        logdir=str(tmp_path),
        log_every_s=0.5,
    )
    result = run_inprocess(experiment)
    assert result.env_steps >= 3_000
    assert result.learner_steps > 0
    assert "budget" in result.stop_reason


def test_grpc_transport_over_a_unix_socket(tmp_path):
    experiment = Experiment(
        builder=VTraceBuilder(SMALL),
        environment="fake:obs=4,len=30",
        num_runners=1,
        envs_per_runner=8,
        max_env_steps=2_000,
        transport="grpc",
        inference_address=f"unix:{tmp_path}/inference.sock",
    )
    result = run_inprocess(experiment)
    assert result.env_steps >= 2_000 and result.learner_steps > 0


def test_inprocess_run_stops_at_its_wall_limit():
    experiment = Experiment(
        builder=VTraceBuilder(SMALL),
        environment="fake:obs=4,len=20",
        num_runners=1,
        envs_per_runner=4,
        max_env_steps=10**9,  # never reached: only the wall limit can stop this run
        max_wall_s=2.0,
    )
    result = run_inprocess(experiment)
    assert "wall-time" in result.stop_reason
    assert result.wall_s >= 2.0 and result.env_steps > 0


def test_inprocess_run_stops_when_the_caller_sets_its_stop_event(tmp_path):
    import threading

    stop = threading.Event()
    experiment = Experiment(
        builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=20", num_runners=1,
        envs_per_runner=4, max_env_steps=10**9, logdir=str(tmp_path), log_every_s=0.1,
        checkpoint_every_s=None)

    def stop_after_a_learner_step():  # the event, however long start-up takes
        while not stop.wait(0.1):
            try:
                with open(tmp_path / "train.csv") as f:
                    rows = list(csv.DictReader(f))
            except OSError:
                continue
            # The last row may be half written as it is read (its learner_steps missing
            # or cut): it counts only once whole. A parse error here once ended this
            # thread, and the run, with no budget but this event, never stopped.
            steps = (rows[-1].get("learner_steps") or "") if rows else ""
            if steps.isdigit() and int(steps) > 0:
                stop.set()

    watcher = threading.Thread(target=stop_after_a_learner_step, daemon=True)
    watcher.start()
    try:
        result = run_inprocess(experiment, stop=stop)
    finally:
        stop.set()
        watcher.join()
    assert result.stop_reason == "stopped by the caller"
    assert result.learner_steps > 0


def test_a_recurrent_agent_learns_in_process():
    config = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,),
                          lstm_size=8)
    experiment = Experiment(
        builder=VTraceBuilder(config),
        environment="fake:obs=4,len=20",
        num_runners=1,
        envs_per_runner=4,
        # 400 unrolls of 5 steps, far more than the queue's 16: acting blocks until the
        # learner takes batches, so reaching the budget means the learner stepped, however
        # long tracing the LSTM graph takes on this machine.
        max_env_steps=2_000,
    )
    result = run_inprocess(experiment)
    assert "budget" in result.stop_reason
    assert result.learner_steps > 0


def test_experiment_rejects_bad_settings():
    with pytest.raises(ValueError, match="num_runners"):
        Experiment(VTraceBuilder(), "gym:CartPole-v1", num_runners=0)
    with pytest.raises(ValueError, match="envs_per_runner=1"):
        Experiment(VTraceBuilder(), "gym:CartPole-v1", inference="local", envs_per_runner=4)
    with pytest.raises(ValueError, match="transport"):
        Experiment(VTraceBuilder(), "gym:CartPole-v1", transport="carrier-pigeon")
    with pytest.raises(ValueError, match="central"):
        Experiment(VTraceBuilder(), "gym:CartPole-v1", transport="grpc", inference="local",
                   envs_per_runner=1)
    with pytest.raises(ValueError, match="replay_port"):
        Experiment(VTraceBuilder(), "gym:CartPole-v1", replay_port=70000)


def test_a_learner_resource_pins_replay_and_learner_and_the_replay_port_is_kept():
    experiment = Experiment(VTraceBuilder(SMALL), "fake:obs=2,len=7", num_runners=2,
                            learner_resource="learner_pod")
    resources = {node.name: node.resources for node in make_program(experiment).nodes}
    assert resources.pop("replay") == resources.pop("learner") == {"learner_pod": 1.0}
    assert all(not r for r in resources.values())  # runners and evaluator go anywhere
    experiment = dataclasses.replace(experiment, runner_resource="cpu_pod")
    resources = {node.name: node.resources for node in make_program(experiment).nodes}
    assert resources["runner-0"] == resources["runner-1"] == {"cpu_pod": 1.0}
    assert resources["learner"] == {"learner_pod": 1.0} and not resources["evaluator"]
    with socket.socket() as probe:  # a port that is free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    experiment = Experiment(VTraceBuilder(SMALL), "fake:obs=2,len=7", replay_port=port,
                            checkpoint_every_s=None)
    server, saver = start_replay(experiment, [reverb.Table.queue("q", 10)])
    try:
        assert server.port == port and saver is None
    finally:
        server.stop()


def test_cli_overrides_parse_and_fail_clearly():
    config = cli.parse_overrides(VTraceConfig, ["learning_rate=3e-4", "hidden_sizes=32,32",
                                                "max_gradient_norm=None"])
    assert config.learning_rate == 3e-4
    assert config.hidden_sizes == (32, 32)
    assert config.max_gradient_norm is None
    with pytest.raises(ValueError, match="no field 'learnin_rate'"):
        cli.parse_overrides(VTraceConfig, ["learnin_rate=1"])
    with pytest.raises(ValueError, match="key=value"):
        cli.parse_overrides(VTraceConfig, ["learning_rate"])
    with pytest.raises(ValueError, match="queue_size"):
        cli.parse_overrides(VTraceConfig, ["queue_size=2"])
    with pytest.raises(ValueError, match="learning_rate takes a number, got 'abc'"):
        cli.parse_overrides(VTraceConfig, ["learning_rate=abc"])
    with pytest.raises(ValueError, match="takes True or False, got 'yes'"):
        cli.parse_overrides(VTraceConfig, ["normalize_advantages=yes"])
    flag = cli.parse_overrides(VTraceConfig, ["normalize_advantages=1"]).normalize_advantages
    assert flag is True


def test_cli_help_and_bad_input():
    out = subprocess.run([sys.executable, "-m", "launch.commands.cli", "train", "--help"],
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
    assert out.returncode == 0
    assert "--envs-per-runner" in out.stdout and "learning_rate=" in out.stdout
    out = subprocess.run([sys.executable, "-m", "launch.commands.cli", "train", "--set", "nope=1"],
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
    assert out.returncode == 2
    assert "no field 'nope'" in out.stderr


def test_cli_trains_and_prints_a_summary(tmp_path):
    logdir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "launch.commands.cli", "train", "--env", "gym:CartPole-v1",
         "--runners", "2", "--envs-per-runner", "4", "--steps", "2000", "--logdir", str(logdir),
         "--set", "unroll_length=5", "--set", "batch_size=4", "--set", "queue_size=16"],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for line in ("episodes:", "env steps:", "mean return", "wall time:", f"logs: {logdir}"):
        assert line in out.stdout
    assert (logdir / "train.csv").exists()


@pytest.mark.parametrize("script", ["cartpole_vtrace.py", "custom_agent.py"])
def test_examples_run(tmp_path, script):
    args = [sys.executable, str(ROOT / "examples" / script), "--steps", "20000"]
    if script == "cartpole_vtrace.py":
        args += ["--logdir", str(tmp_path)]
    out = subprocess.run(args, capture_output=True, text=True, env=_env(), cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "env steps:" in out.stdout and "learner steps:" in out.stdout
    learner_steps = int(out.stdout.split("learner steps:")[1].split()[0].replace(",", ""))
    assert learner_steps > 0


def test_pong_example_prints_the_command_line_of_the_same_run():
    import dataclasses
    import importlib.util
    import shlex

    from launch.commands.cli import build_parser, make_experiment

    spec = importlib.util.spec_from_file_location("atari_pong", ROOT / "examples" / "atari_pong.py")
    pong = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pong)
    args = pong.parse_args(["--minutes", "30", "--seed", "3", "--logdir", "runs/my pong"])
    words = shlex.split(pong.command_line(args))
    assert words[:2] == ["seed-agents", "train"]
    from_cli = make_experiment(build_parser().parse_args(words[1:]))
    from_example = pong.make_experiment(args)
    assert from_cli.builder.config == from_example.builder.config == pong.PONG_CONFIG
    assert from_cli.builder.config.precision == "auto"  # not the default: really passed
    differ = {f.name for f in dataclasses.fields(from_cli)  # but secrets: new ones per run
              if f.compare and getattr(from_cli, f.name) != getattr(from_example, f.name)}
    assert not differ, differ
    assert from_cli.max_wall_s == 1800 and from_cli.logdir == "runs/my pong"
    # --set after a preset wins over it.
    tuned = make_experiment(build_parser().parse_args([*words[1:], "--set", "batch_size=8"]))
    assert tuned.builder.config.batch_size == 8
    assert tuned.builder.config.precision == "auto"


def test_cli_rejects_a_preset_its_agent_lacks(capsys):
    from launch.commands.cli import main

    assert main(["train", "--agent", "r2d2", "--preset", "atari_cpu"]) == 2
    assert "--agent r2d2 has no preset 'atari_cpu'" in capsys.readouterr().err


def test_pong_example_trains_on_the_real_ale_and_checkpoints(tmp_path):
    args = [sys.executable, str(ROOT / "examples" / "atari_pong.py"), "--steps", "2500",
            "--runners", "1", "--envs-per-runner", "4", "--minutes", "4",
            "--logdir", str(tmp_path / "pong")]
    out = subprocess.run(args, capture_output=True, text=True, env=_env(), cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    learner_steps = int(out.stdout.split("learner steps:")[1].split()[0].replace(",", ""))
    assert learner_steps > 0 and "budget" in out.stdout
    assert (tmp_path / "pong" / "train.csv").exists()
    assert any((tmp_path / "pong" / "checkpoints" / "learner").iterdir())
