"""A resumed run keeps its story whole: episode window, wall time, curves, identity."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from builders.r2d2 import R2D2Builder
from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.commands.cli import AGENTS
from launch.commands.evaluation import evaluate
from launch.experiment import Experiment
from launch.restore import load_run
from launch.run_record import read_run_record, write_run_record
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.inference.security import make_token
from seed_agents.inference.server import EpisodeStats
from seed_agents.utils import checkpointing
from seed_agents.utils.checkpointing import Checkpointer
from seed_agents.utils.counting import Counter, RunClock
from tests.leaks import files_holding

SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_resumed_run_continues_its_window_wall_time_and_curves(tmp_path):
    first = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=15",
                       num_runners=1, envs_per_runner=4, max_env_steps=1_500,
                       logdir=str(tmp_path), log_every_s=0.2, evaluate_every_s=0.2)
    run_inprocess(first, stream=io.StringIO())
    assert files_holding(tmp_path, first.inference_token) == []  # no secret at rest
    # A record written before tokens were left out held one: the resumed run's record
    # replaces it.
    record = json.loads((tmp_path / "run.json").read_text())
    record["experiment"]["inference_token"] = first.inference_token
    (tmp_path / "run.json").write_text(json.dumps(record))
    saved = checkpointing.latest_checkpoint_info(checkpointing.learner_directory(tmp_path))
    window = saved.state["episodes"]
    wall = saved.state["clock"]["wall_s"]
    assert len(window["returns"]) == 100 and window["episodes"] >= 100 and wall > 0
    rows_before = len(_rows(tmp_path / "train.csv"))
    evaluations_before = len(_rows(tmp_path / "evaluator.csv"))

    # The killed run's time counts toward max_wall_s: a little more and the resumed
    # run stops on it, its budget untouched.
    budget = saved.counts["env_steps"] + 10**9
    stream = io.StringIO()
    second = dataclasses.replace(first, max_env_steps=budget, resume=True,
                                 max_wall_s=wall + 3.0, inference_token=make_token())
    resumed = run_inprocess(second, stream=stream)
    assert "wall-time limit" in resumed.stop_reason
    for token in (first.inference_token, second.inference_token):
        assert files_holding(tmp_path, token) == []
    assert wall + 3.0 <= resumed.wall_s < wall + 60.0
    assert resumed.episodes >= window["episodes"]
    rows = _rows(tmp_path / "train.csv")
    continuation = rows[rows_before:]
    assert continuation, "the resumed run appended no train rows"
    # Its first row goes on from the checkpoint: no zero steps, no empty window.
    first_row = continuation[0]
    assert int(first_row["env_steps"]) >= saved.counts["env_steps"]
    assert float(first_row["wall_s"]) >= wall
    assert int(first_row["episodes"]) >= window["episodes"]
    assert math.isfinite(float(first_row["mean_return"]))
    assert len(_rows(tmp_path / "evaluator.csv")) >= evaluations_before  # appended to
    assert len(read_run_record(tmp_path).started) == 2
    # The continued run evaluates like any other, from its own newest checkpoint.
    run = load_run(tmp_path, AGENTS)
    assert run.checkpoint.counts["env_steps"] >= saved.counts["env_steps"]
    assert run.checkpoint.path != saved.path
    assert len(evaluate(run, episodes=2).returns) == 2


def test_resuming_another_agent_or_environment_is_refused_and_changes_nothing(tmp_path):
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=15",
                            num_runners=1, envs_per_runner=4, max_env_steps=300,
                            logdir=str(tmp_path), evaluate_every_s=None)
    run_inprocess(experiment, stream=io.StringIO())
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="builders.r2d2.R2D2Builder") as error:
        other = R2D2Builder(R2D2Config(num_eval_envs=0))
        run_inprocess(dataclasses.replace(experiment, builder=other, resume=True))
    assert "which trained builders.vtrace.VTraceBuilder on fake:obs=4,len=15" in str(error.value)
    with pytest.raises(ValueError, match="environment 'fake:obs=4,len=16'"):
        run_local_mp(dataclasses.replace(experiment, environment="fake:obs=4,len=16",
                                         resume=True))
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_run_resumed_with_other_settings_says_which(tmp_path):
    """The checkpoint fits a changed config (another preset, a new `--set`): the resumed
    run goes on with it, and says what changed."""
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=15",
                            logdir=str(tmp_path))
    write_run_record(experiment)
    same, changed = io.StringIO(), io.StringIO()
    write_run_record(dataclasses.replace(experiment, resume=True), same)
    assert same.getvalue() == ""
    other = VTraceBuilder(dataclasses.replace(SMALL, learning_rate=5e-4, batch_size=8))
    write_run_record(dataclasses.replace(experiment, builder=other, resume=True), changed)
    assert (f"--resume: {tmp_path} goes on with settings that differ from its last "
            "piece's: batch_size: 4 -> 8; learning_rate: 0.001 -> 0.0005") in changed.getvalue()
    record = read_run_record(tmp_path)
    assert record.config["batch_size"] == 8 and len(record.started) == 3


def _objects() -> dict:
    return {"step": tf.Variable(3, dtype=tf.int64)}


def test_checkpoints_carry_their_format_and_state_and_read_the_old_layout(tmp_path):
    counter, stats, clock = Counter(), EpisodeStats(window=3), RunClock()
    counter.increment(env_steps=50)
    stats.record(np.array([1.0, 2.0, 3.0, 4.0]), np.array([5, 6, 7, 8]))
    identity = {"builder": "b.B", "environment": "fake:obs=4"}
    Checkpointer(_objects(), tmp_path / "new", counter, state={"episodes": stats,
                 "clock": clock}, identity=identity).save()
    restored_stats, restored_clock = EpisodeStats(window=3), RunClock()
    Checkpointer(_objects(), tmp_path / "new", Counter(), identity=identity,
                 state={"episodes": restored_stats, "clock": restored_clock}).restore_latest()
    assert restored_stats.summary() == stats.summary()
    assert restored_stats.summary()["mean_return"] == 3.0 and restored_stats.episodes == 4
    assert restored_clock.elapsed_s() >= restored_clock.before_s > 0
    with pytest.raises(ValueError, match="another run: environment 'fake:obs=4'"):
        Checkpointer(_objects(), tmp_path / "new",
                     identity={**identity, "environment": "fake:obs=5"}).restore_latest()

    # Format 0: the counts alone, as checkpoints were written before versions.
    old = tf.train.Checkpoint(step=tf.Variable(3, dtype=tf.int64),
                              counts=tf.Variable(json.dumps({"env_steps": 9})))
    tf.train.CheckpointManager(old, tmp_path / "old", max_to_keep=1).save()
    counter, clock = Counter(), RunClock()
    assert Checkpointer(_objects(), tmp_path / "old", counter, identity=identity,
                        state={"clock": clock}).restore_latest()
    assert counter.get_counts() == {"env_steps": 9} and clock.before_s == 0.0
    info = checkpointing.latest_checkpoint_info(tmp_path / "old")
    assert info.format == 0 and info.counts == {"env_steps": 9} and info.identity == {}


def test_resume_if_checkpointed_resumes_only_a_logdir_with_a_learner_checkpoint(tmp_path):
    # What a scheduler that runs a lost job again needs: one command for the first start
    # and for every start after it.
    from launch.commands import cli
    from seed_agents.utils.checkpointing import learner_directory

    logdir = tmp_path / "run"
    argv = ["train", "--agent", "vtrace", "--env", "gym:CartPole-v1", "--logdir", str(logdir),
            "--resume-if-checkpointed"]
    assert not cli.make_experiment(cli.build_parser().parse_args(argv)).resume
    os.makedirs(learner_directory(str(logdir)))
    # TF's CheckpointManager writes this state file last, once a checkpoint is complete.
    (Path(learner_directory(str(logdir))) / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-1"\n')
    assert cli.make_experiment(cli.build_parser().parse_args(argv)).resume
    with pytest.raises(ValueError, match="continues the run in --logdir: name it"):
        cli.make_experiment(cli.build_parser().parse_args(argv[:5] + argv[7:]))
