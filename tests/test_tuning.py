"""`seed-agents train --search`: Optuna asks for settings, each trial is an ordinary run
in the parent logdir, ASHA stops poor trials by SIGINT, and a stopped search resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from launch.studies.comparing import compare_runs
from launch.studies.results import find_runs
from launch.studies.tuning import (
    STUDY_FILE,
    SearchSpace,
    _follow,
    _outcome,
    _Running,
    format_value,
    parse_search,
    plan_trial,
)
from seed_agents.utils.trackers import CSVFollower
from tests.run_logs import interrupt_when, last_env_steps

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--env", "fake:obs=4,len=20", "--set", "unroll_length=5", "--set", "batch_size=4",
         "--set", "queue_size=16", "--set", "hidden_sizes=16,", "--evaluate-every-s", "0",
         "--runners", "1", "--envs-per-runner", "2", "--log-every-s", "0.2"]


def _search(parent: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launch.commands.cli", "train", "--agent", "vtrace", *SMALL,
         "--logdir", str(parent), "--search", "learning_rate=log:1e-4,1e-2", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def test_search_spaces_parse_and_bad_ones_are_refused():
    spaces = parse_search(["learning_rate=log:1e-4,1e-2", "n_step=int:1,5",
                           "hidden_sizes=choice:64,64|128"])
    assert spaces[0] == SearchSpace("learning_rate", "log", ("1e-4", "1e-2"))
    assert spaces[2].values == ("64,64", "128")
    assert spaces[1].distribution().high == 5 and spaces[0].distribution().log
    for bad, message in ((["lr"], "KEY=KIND"), (["lr=normal:0,1"], "KEY=KIND"),
                         (["lr=log:0,1"], "LOW > 0"), (["lr=float:1,1"], "LOW < HIGH"),
                         (["lr=int:1.5,3"], "int bounds"), (["lr=choice:a"], "two or more"),
                         (["lr=log:1,2", "lr=float:1,2"], "twice")):
        with pytest.raises(ValueError, match=message):
            parse_search(bad)
    assert format_value(0.000123456) == "0.0001235" and format_value(3) == "3"
    run = plan_trial("p", 7, ["learning_rate=0.001"])
    assert run.logdir == os.path.join("p", "learning_rate=0.001", "seed-7")


def test_a_search_runs_its_trials_as_runs_and_reports_the_best(tmp_path):
    parent = tmp_path / "tune"
    search = _search(parent, "--steps", "600", "--trials", "3", "--min-steps", "200")
    out, _ = search.communicate(timeout=900)
    assert search.returncode == 0, out[-3000:]
    summary = json.loads((parent / "tune.json").read_text())
    assert len(summary["trials"]) == 3
    assert {t["state"] for t in summary["trials"]} <= {"complete", "pruned"}
    complete = [t for t in summary["trials"] if t["state"] == "complete"]
    best = summary["best"]
    assert best["value"] == max(t["value"] for t in complete)
    assert "best: trial" in out and "curves: seed-agents plot" in out
    for trial in summary["trials"]:  # each an ordinary run, its setting in its record
        record = json.loads((Path(trial["logdir"]) / "run.json").read_text())
        rate = trial["params"]["learning_rate"]
        assert record["config"]["learning_rate"] == float(format_value(rate))
        assert 1e-4 <= rate <= 1e-2
    assert len(find_runs([str(parent)])) == 3
    comparison = compare_runs([str(parent)], unfinished=True, reps=200)
    assert len(comparison["settings"]) == 3
    again = _search(parent, "--steps", "600", "--trials", "3", "--min-steps", "200")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 2 and "--resume" in out  # a parent's search is kept


def test_a_stopped_search_resumes_its_cut_off_trial_in_its_own_directory(tmp_path):
    parent = tmp_path / "tune"
    args = ("--steps", "1000000000", "--trials", "2", "--prune", "none")
    search = _search(parent, *args)
    out = interrupt_when(search, lambda: any(
        last_env_steps(p.parent) >= 200 for p in parent.glob("*/seed-0/train.csv")))
    assert search.returncode == 130 and "--resume continues the search" in out, out[-3000:]
    (cut,) = [p.parent for p in parent.glob("*/seed-0/train.csv")]
    assert not (cut / "result.json").exists()
    # Continued with a wall-time limit the cut-off trial is already past: it resumes from
    # its checkpoint and stops at once; the second trial starts and stops by the same limit.
    resumed = _search(parent, *args, "--resume", "--max-wall-s", "1")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    summary = json.loads((parent / "tune.json").read_text())
    assert len(summary["trials"]) == 2  # the cut-off trial counts once
    assert str(cut) in {t["logdir"] for t in summary["trials"]}
    assert len(json.loads((cut / "run.json").read_text())["started"]) == 2  # resumed
    assert (cut / "result.json").exists()
    study = optuna.load_study(study_name="tune", storage=f"sqlite:///{parent / STUDY_FILE}")
    assert [t.state.name for t in study.trials].count("FAIL") == 1  # the cut-off one


def test_a_trial_below_its_rung_is_stopped_by_sigint_and_pruned(tmp_path):
    """The pruner's word reaches the trial's process: a stand-in run writes a train.csv
    of poor returns; the study's earlier trials did far better at the same rung."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.SuccessiveHalvingPruner(
        min_resource=100, reduction_factor=3))
    space = {"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    for value in (50.0, 60.0, 70.0):  # earlier trials, through the rungs as a search has them
        earlier = study.ask(space)
        for step in range(50, 1000, 50):
            earlier.report(value, step)
            assert not earlier.should_prune()
        study.tell(earlier, value)
    trial = study.ask(space)
    logdir = tmp_path / "run"
    logdir.mkdir()
    # The stand-in takes SIGINT as `seed-agents train` does (launch/commands/cli.py):
    # Python leaves SIGINT ignored in a process started with it ignored (a background job
    # of a script, as CI may be), and this one would then run to its end unstopped. It
    # writes for longer than the deadline, so only SIGINT ends it (an uncaught
    # KeyboardInterrupt: Python exits by SIGINT, returncode -2).
    writer = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "f = open(sys.argv[1], 'w'); f.write('env_steps,mean_return\\n'); f.flush()\n"
        "for step in range(50, 10_000_000, 50):\n"
        "    f.write(f'{step},5.0\\n'); f.flush(); time.sleep(0.05)\n"),
        str(logdir / "train.csv")], stderr=subprocess.DEVNULL)
    entry = _Running(trial, plan_trial(str(tmp_path), 0, ["learning_rate=0.001"]), writer,
                     CSVFollower(str(logdir / "train.csv")))
    deadline = time.monotonic() + 120
    while writer.poll() is None and time.monotonic() < deadline:
        _follow(entry)
        time.sleep(0.1)
    if writer.poll() is None:
        writer.kill()
    writer.wait()
    assert entry.pruned and writer.returncode == -signal.SIGINT  # stopped by the pruner
    assert 100 <= entry.last_step < 1000
    assert _outcome(entry)[0] == optuna.trial.TrialState.PRUNED
