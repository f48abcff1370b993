"""Seeds and grids in one command (`launch.studies.sweeps`), and what reads a sweep back:
`seed-agents compare` (rliable's intervals) and `seed-agents plot` of a parent."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import trim_mean

from launch.commands import cli
from launch.studies.comparing import compare_runs, format_table
from launch.studies.results import final_score, find_runs
from launch.studies.sweeps import parse_grid, parse_seeds, plan_sweep, setting_name
from tests.run_logs import interrupt_when, last_env_steps

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--env", "fake:obs=4,len=20", "--set", "unroll_length=5", "--set", "batch_size=4",
         "--set", "queue_size=16", "--set", "hidden_sizes=16,", "--evaluate-every-s", "0",
         "--runners", "1", "--envs-per-runner", "2", "--log-every-s", "0.5"]


def test_seeds_and_grids_parse_into_one_run_per_setting_and_seed(tmp_path):
    assert parse_seeds("0-2,7") == (0, 1, 2, 7)
    assert parse_seeds("3") == (3,)
    for bad, message in (("a", "ranges like"), ("3-1", "backwards"), ("1,0-2", "twice")):
        with pytest.raises(ValueError, match=message):
            parse_seeds(bad)
    grid = parse_grid(["learning_rate=1e-4,3e-4", "hidden_sizes=64,64|128"])
    assert grid == [("learning_rate", ("1e-4", "3e-4")), ("hidden_sizes", ("64,64", "128"))]
    for bad, message in ((["lr"], "KEY=V1"), (["lr=1,,2"], "empty value"),
                         (["lr=1,1"], "twice"), (["lr=1", "lr=2"], "one entry")):
        with pytest.raises(ValueError, match=message):
            parse_grid(bad)
    runs = plan_sweep(str(tmp_path), (0, 1), grid)
    assert len(runs) == 8 and runs[0].seed == 0 and runs[1].seed == 1
    assert runs[0].overrides == ("learning_rate=1e-4", "hidden_sizes=64,64")
    assert runs[0].logdir == str(tmp_path / "learning_rate=1e-4,hidden_sizes=64,64" / "seed-0")
    assert [r.setting for r in plan_sweep("p", (5,), [])] == ["default"]
    assert setting_name(["env=a/b c"]) == "env=a_b_c"  # never a path separator


def _train(*args: str) -> int:
    return cli.main(["train", *SMALL, *args])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A finished sweep: 2 learning rates x 2 seeds, 300 env steps each."""
    parent = tmp_path_factory.mktemp("sweep")
    args = ("--steps", "300", "--seeds", "0-1", "--grid", "learning_rate=1e-3,1e-4",
            "--logdir", str(parent))
    assert _train(*args) == 0
    return parent, args


def test_a_sweep_runs_every_setting_and_seed_as_an_ordinary_run(sweep, capsys):
    parent, args = sweep
    for setting in ("learning_rate=1e-3", "learning_rate=1e-4"):
        for seed in (0, 1):
            logdir = parent / setting / f"seed-{seed}"
            record = json.loads((logdir / "run.json").read_text())
            assert record["experiment"]["seed"] == seed
            assert record["config"]["learning_rate"] == float(setting.split("=")[1])
            result = json.loads((logdir / "result.json").read_text())
            assert result["env_steps"] >= 300 and "budget" in result["stop_reason"]
    recorded = json.loads((parent / "sweep.json").read_text())
    assert len(recorded["runs"]) == 4 and recorded["seeds"] == [0, 1]
    # Continued: nothing left to run, nothing rewritten.
    stamps = {p: p.stat().st_mtime_ns for p in parent.glob("*/seed-*/result.json")}
    capsys.readouterr()
    assert _train(*args, "--resume") == 0
    assert "4 finished, 0 to run" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in parent.glob("*/seed-*/result.json")} == stamps
    # Without --resume, or with other settings, the parent is refused and left alone.
    assert _train(*args) == 2
    assert "add --resume" in capsys.readouterr().err
    assert _train("--steps", "300", "--seeds", "0-2", "--grid", "learning_rate=1e-3,1e-4",
                  "--logdir", str(parent), "--resume") == 2
    assert "differs in seeds" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in parent.glob("*/seed-*/result.json")} == stamps


def test_a_bad_grid_fails_before_any_run_starts(tmp_path, capsys):
    assert _train("--steps", "300", "--grid", "learnin_rate=1,2", "--logdir",
                  str(tmp_path / "p")) == 2
    assert "setting learnin_rate=1" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
    assert _train("--seeds", "0-1", "--parallel", "0", "--logdir", str(tmp_path / "q")) == 2
    assert not (tmp_path / "q").exists()


def test_compare_prints_iqm_and_mean_with_intervals_and_writes_a_table(sweep, capsys):
    parent, _ = sweep
    assert cli.main(["compare", str(parent), "--reps", "500"]) == 0
    out = capsys.readouterr().out
    assert "IQM [95% CI]" in out and "mean [95% CI]" in out
    assert "P(learning_rate=1e-3 > learning_rate=1e-4)" in out
    with open(parent / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["setting"] for r in rows) == ["learning_rate=1e-3", "learning_rate=1e-4"]
    for row in rows:
        assert row["seeds"] == "2"
        assert float(row["iqm_low"]) <= float(row["iqm"]) <= float(row["iqm_high"])


def test_plot_of_a_parent_draws_each_setting_with_a_bootstrap_band(sweep, tmp_path, capsys):
    parent, _ = sweep
    out = tmp_path / "sweep.png"
    assert cli.main(["plot", str(parent), "--out", str(out), "--statistic", "iqm"]) == 0
    printed = capsys.readouterr().out
    assert "learning_rate=1e-3 (2 runs)" in printed and "learning_rate=1e-4 (2 runs)" in printed
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.png")]) == 2


def _fake_run(logdir: Path, env: str, score: float, finished: bool = True) -> None:
    """A run's files as compare reads them: no training needed to test the statistics."""
    logdir.mkdir(parents=True)
    (logdir / "run.json").write_text(json.dumps({"environment": env}))
    (logdir / "train.csv").write_text(f"env_steps,episodes,mean_return\n100,10,{score}\n")
    if finished:
        (logdir / "result.json").write_text(json.dumps(
            {"mean_return": score, "eval_mean_return": None, "env_steps": 100}))


def test_compare_statistics_are_rliables_over_seeds_and_normalized_across_tasks(tmp_path):
    good = [10.0, 12.0, 11.0, 30.0, 9.0]
    bad = [1.0, 2.0, 0.5, 3.0, 1.5]
    for game, offset in (("Pong", 0.0), ("Breakout", 5.0)):
        for setting, scores in (("good", good), ("bad", bad)):
            for seed, score in enumerate(scores):
                _fake_run(tmp_path / game / setting / f"seed-{seed}", f"atari:{game}",
                          score + offset)
    _fake_run(tmp_path / "Pong" / "good" / "seed-9", "atari:Pong", 99.0, finished=False)
    one = compare_runs([str(tmp_path / "Pong")], reps=2_000)
    rows = {r["setting"]: r for r in one["settings"]}
    assert one["normalization"] == "raw scores" and rows["good"]["seeds"] == 5
    assert rows["good"]["iqm"][0] == pytest.approx(trim_mean(good, 0.25))
    assert rows["good"]["mean"][0] == pytest.approx(np.mean(good))
    low, high = rows["good"]["mean"][1:]
    assert low < np.mean(good) < high and low >= min(good) and high <= max(good)
    better = next(p for p in one["improvement"] if p["x"] == "good")
    assert better["p"] == pytest.approx(1.0)  # every good seed beats every bad one
    assert any("seed-9" in logdir and why == "not finished" for logdir, why in one["left_out"])
    # Two games: human-normalized scores, each game's own reference.
    both = compare_runs([str(tmp_path / "Pong"), str(tmp_path / "Breakout")], reps=500)
    assert both["tasks"] == ["atari:Breakout", "atari:Pong"]
    assert both["normalization"].startswith("human-normalized")
    assert "IQM [95% CI]" in format_table(both)
    for setting in ("good", "bad"):
        _fake_run(tmp_path / "Other" / setting / "seed-0", "gym:CartPole-v1", 1.0)
    with pytest.raises(ValueError, match="no random and human scores"):
        compare_runs([str(tmp_path / "Pong"), str(tmp_path / "Other")], normalize="human")
    assert [r.setting for r in find_runs([str(tmp_path / "Pong")])].count("good") == 6
    # A learning benchmark's record (learn_atari5.py's result.json) is read as finished.
    bench = tmp_path / "bench" / "Qbert" / "seed-1"
    _fake_run(bench, "atari:Qbert", 0.0, finished=False)
    (bench / "result.json").write_text(json.dumps({"value": 4321.0, "at_budget": True}))
    assert final_score(str(bench)) == (4321.0, True)


def test_compare_without_rliable_names_the_extra(tmp_path, monkeypatch, capsys):
    _fake_run(tmp_path / "a" / "seed-0", "gym:CartPole-v1", 1.0)
    monkeypatch.setitem(sys.modules, "rliable", None)  # as if not installed
    assert cli.main(["compare", str(tmp_path)]) == 2
    assert "pip install 'seed-agents[stats]'" in capsys.readouterr().err


def test_ctrl_c_stops_a_sweep_and_resume_continues_it(tmp_path):
    parent = tmp_path / "sweep"
    command = [sys.executable, "-m", "launch.commands.cli", "train", *SMALL,
               "--steps", "1000000000", "--seeds", "0-1", "--logdir", str(parent)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output = interrupt_when(process, lambda: last_env_steps(parent / "default" / "seed-0") >= 200)
    assert process.returncode == 130, output[-2000:]
    assert "with --resume continues the sweep" in output
    assert not (parent / "default" / "seed-0" / "result.json").exists()
    assert not (parent / "default" / "seed-1").exists()  # never started
    # Continued with a wall-time limit the first run is already past: it resumes from its
    # checkpoint and stops at once, the second starts and stops by the same limit.
    again = subprocess.run([*command, "--resume", "--max-wall-s", "1"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-2000:]
    first = json.loads((parent / "default" / "seed-0" / "run.json").read_text())
    assert len(first["started"]) == 2  # resumed, not started afresh
    for seed in (0, 1):
        result = json.loads((parent / "default" / f"seed-{seed}" / "result.json").read_text())
        assert "wall" in result["stop_reason"]
