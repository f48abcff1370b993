"""`benchmarks/learn_pong.py`'s reading of a run's logs: the score curve, the frames to each
milestone (on 100-game means only) and the learner's busy fraction."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.run_logs import last_env_steps

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("learn_pong", ROOT / "benchmarks" /
                                                  "learn_pong.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


def test_the_cost_of_frames_adds_up_over_a_runs_pieces(bench, tmp_path):
    _write(tmp_path / "train.csv", "env_steps,episodes", ["100,1", "2500,7"])
    assert bench.logged_env_steps(str(tmp_path)) == 2500  # where a resumed piece starts
    assert bench.logged_env_steps(str(tmp_path / "none")) == 0
    first = bench.piece_cost(str(tmp_path), 100.0, 0, 1_000_000, 0.036)
    assert first["core_s_per_1m_frames"] == first["piece_core_s_per_1m_frames"] == 100.0
    assert first["usd_per_1m_frames"] == pytest.approx(100.0 / 3600 * 0.036, abs=1e-4)
    second = bench.piece_cost(str(tmp_path), 500.0, 1_000_000, 2_000_000, 0.036)
    # 600 core-seconds over 2M frames, the second piece alone 500 per million.
    assert second["piece_core_s_per_1m_frames"] == 500.0
    assert second["core_s_per_1m_frames"] == 300.0 and second["cpu_pieces"] == 2


def test_the_curve_counts_frames_and_reads_milestones_on_100_game_means(bench, tmp_path):
    _write(tmp_path / "train.csv", "env_steps,episodes,mean_return,steps_per_s",
           ["0,0,nan,0", "1000,40,12.0,800", "2000,100,-5.0,800", "3000,150,10.5,800",
            "4000,210,18.0,800"])
    curve = bench.score_curve(str(tmp_path))
    # Frames are 4 per env step; the row without a mean is left out.
    assert curve == [(4000, 40, 12.0), (8000, 100, -5.0), (12000, 150, 10.5),
                     (16000, 210, 18.0)]
    # The 12.0 over 40 games does not count: a milestone is read on 100 games or more.
    assert bench.frames_to(curve, 10.0) == 12000
    assert bench.frames_to(curve, 0.0) == 12000
    assert bench.frames_to(curve, -5.0) == 8000
    assert bench.frames_to(curve, 18.0) == 16000
    assert bench.frames_to(curve, 19.0) is None


def test_the_json_line_reads_the_networks_health_and_the_policys_entropy_last(
        bench, tmp_path):
    assert bench.feature_health_summary(str(tmp_path)) == {
        "live_features_last": None, "live_features_min": None, "value_std_last": None,
        "entropy_last": None}
    # A row without a figure (nan, empty) is skipped, not read as the run's last or lowest.
    _write(tmp_path / "learner.csv", "learner_steps,live_features,value_std,entropy",
           ["1,0.5,0.01,1.79", "2,0.3,0.2,1.7", "3,nan,,nan", "4,0.98,0.40412,1.64444",
            "5,,,"])
    assert bench.feature_health_summary(str(tmp_path)) == {
        "live_features_last": 0.98, "live_features_min": 0.3, "value_std_last": 0.404,
        "entropy_last": 1.644}


def test_the_learner_is_busy_for_the_time_it_did_not_wait_for_data(bench, tmp_path):
    _write(tmp_path / "rates.csv", "env_steps,replay_sample_wait_frac",
           ["100,0.9", "200,0.1", "300,", "400,0.2"])
    assert bench.learner_busy_fraction(str(tmp_path)) == pytest.approx(0.6)
    _write(tmp_path / "rates.csv", "env_steps,replay_sample_wait_frac", [])
    assert bench.learner_busy_fraction(str(tmp_path)) is None


def test_r2d2_is_judged_on_its_evaluation_games(bench, tmp_path):
    _write(tmp_path / "train.csv",
           "env_steps,episodes,mean_return,eval_episodes,eval_mean_return",
           ["0,0,nan,0,nan", "1000,120,-20.0,30,-15.0", "2000,240,-18.0,100,-12.5"])
    assert bench.score_curve(str(tmp_path), "eval_") == [(4000, 30, -15.0),
                                                        (8000, 100, -12.5)]
    assert bench.score_curve(str(tmp_path)) == [(4000, 120, -20.0), (8000, 240, -18.0)]
    # A V-trace run has no evaluation columns: no curve rather than a wrong one.
    _write(tmp_path / "train.csv", "env_steps,episodes,mean_return", ["1000,120,-20.0"])
    assert bench.score_curve(str(tmp_path), "eval_") == []


def test_each_agent_gets_its_atari_preset_and_overrides_win(bench):
    vtrace = bench.make_builder("vtrace", "atari_ppo", [], 2_500_000)
    assert type(vtrace).__name__ == "VTraceBuilder"
    assert (vtrace.config.max_learning_rate, vtrace.config.torso_learning_rate_scale) == (
        1e-3, 0.25)
    r2d2 = bench.make_builder("r2d2", "atari", ["samples_per_insert=4"], 2_500_000)
    assert type(r2d2).__name__ == "R2D2Builder"
    assert (r2d2.config.torso, r2d2.config.samples_per_insert) == ("nature_cnn", 4)
    # 4 sequences of 32 trained rows per 16 new steps: DQN's 8 rows per env step.
    figures = bench.replay_figures(r2d2.config, float("nan"))
    assert figures["trained_rows_per_env_step"] == 8.0
    assert figures["train_mean_return"] is None
    assert bench.replay_figures(bench.make_builder("r2d2", "atari", [], 1).config,
                                -20.123)["trained_rows_per_env_step"] == 4.0
    with pytest.raises(ValueError, match="r2d2 has no preset 'atari_ppo'"):
        bench.make_builder("r2d2", "atari_ppo", [], 1)
    with pytest.raises(ValueError, match="agent must be one of"):
        bench.make_builder("dqn", "atari", [], 1)


def test_learn_pong_refuses_a_preset_the_agent_does_not_have():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "learn_pong.py"),
                          "--agent", "r2d2", "--preset", "atari_ppo"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2
    assert "--agent r2d2 has no preset 'atari_ppo'; it has atari, minatar" in out.stderr


def test_a_resumed_piece_counts_minutes_over_the_whole_run_and_refuses_a_spent_total(
        bench, tmp_path):
    import subprocess
    import sys

    _write(tmp_path / "train.csv", "env_steps,episodes,wall_s", ["100,1,60.5", "900,7,3000.0"])
    assert bench.logged_wall_s(str(tmp_path)) == 3000.0
    assert bench.logged_wall_s(str(tmp_path / "none")) == 0.0
    # 50 minutes when the run has run 50 already: refused before any process starts.
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "learn_pong.py"),
                          "--resume", "--logdir", str(tmp_path), "--minutes", "50"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 2
    assert "has run 50.0 min, and --minutes counts all its pieces" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv"]


def test_r2d2_atari_preset_learns_from_stacked_frames_through_central_inference(tmp_path):
    import io

    from launch.backends.inprocess import run_inprocess
    from launch.commands.cli import build_parser, make_experiment

    experiment = make_experiment(build_parser().parse_args(
        ["train", "--agent", "r2d2", "--env", "atari:Pong,max_frames=200", "--preset",
         "atari", "--runners", "1", "--envs-per-runner", "3", "--steps", "600",
         "--logdir", str(tmp_path), "--checkpoint-every-s", "0",
         "--set", "batch_size=2", "--set", "min_replay_size=2", "--set", "replay_size=32",
         "--set", "num_eval_envs=1", "--set", "burn_in=2", "--set", "trace_length=8",
         "--set", "sequence_period=4"]))
    config = experiment.builder.config
    assert (config.torso, config.lstm_size, config.n_step) == ("nature_cnn", 256, 5)
    assert experiment.server_frame_stack == 4  # single frames on the wire, stacks stored
    result = run_inprocess(experiment, stream=io.StringIO())
    assert "budget" in result.stop_reason
    assert result.learner_steps > 0
    # 50-step games: the evaluation environment's ended games (~4 of its ~200 steps) give
    # its own score.
    assert result.eval_mean_return is not None and -50 <= result.eval_mean_return <= 50


def test_ctrl_c_stops_learn_pong_and_says_how_to_resume(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "learn_pong.py"), "--frames", "100000000",
         "--runners", "1", "--envs-per-runner", "2", "--baseline-games", "1",
         "--logdir", str(tmp_path), "--set", "batch_size=4", "--set", "queue_size=8",
         "--set", "unroll_length=8"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while last_env_steps(tmp_path) < 100:
            assert process.poll() is None and time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 130, output[-2000:]
        assert f"--logdir {tmp_path} --resume" in output
        assert "Traceback" not in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
