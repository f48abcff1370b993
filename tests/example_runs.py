"""Runs an example's script and the commands after training on its run, as a user would
(subprocesses, the checkout on PYTHONPATH); shared by the example tests of each backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {  # script -> (--agent, the builder's importable name in run.json)
    "custom_agent.py": ("examples.custom_agent:ReinforceBuilder", "custom_agent.ReinforceBuilder"),
    "dqn.py": ("examples.dqn:DQNBuilder", "dqn.DQNBuilder"),
}
RAY_NODE_IP = "127.0.0.2"  # the tests' Ray address (see tests/test_ray_backend.py)


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=_env(), cwd=cwd,
                          timeout=600)


def cli(*args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "launch.commands.cli", *args], ROOT)


AFTER_TRAINING = ("export", "record", "plot", "resume")
"""The commands `check_example` can run on a trained example's run, in this order."""


def check_example(tmp_path: Path, script: str, backend: str,
                  after: tuple[str, ...] = ()) -> list[str]:
    """Trains `script` briefly on `backend` from its own directory's parent, then evaluates
    the run by import path and runs the commands named in `after` (of `AFTER_TRAINING`) on
    it. Returns the commands that worked, in order, for the caller to check it got them all.

    Each command after training works the same way for every custom agent (it loads the
    builder by its import path from run.json), so the example tests share them out rather
    than each running all four: the suite runs on two cores."""
    unknown = set(after) - set(AFTER_TRAINING)
    assert not unknown, f"check_example cannot run {sorted(unknown)}"
    agent, importable = EXAMPLES[script]
    logdir = tmp_path / "run"
    train = [sys.executable, str(ROOT / "examples" / script), "--backend", backend,
             "--logdir", str(logdir), "--steps", "1500", "--ray-node-ip", RAY_NODE_IP]
    ran = run(train, tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "last checkpoint: " in ran.stdout  # the learner's final save finished
    assert json.loads((logdir / "run.json").read_text())["builder"] == importable
    evaluation = cli("eval", "--agent", agent, "--logdir", str(logdir), "--episodes", "2",
                     "--json", str(tmp_path / "eval.json"))
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"] == 2
    done = ["train", "eval"]
    if "export" in after:
        exported = cli("export", "--agent", agent, "--logdir", str(logdir),
                       "--out", str(tmp_path / "saved"))
        assert exported.returncode == 0, exported.stderr[-3000:]
        assert (tmp_path / "saved" / "saved_model.pb").exists()
        done.append("export")
    if "record" in after:
        recorded = cli("record", "--agent", agent, "--logdir", str(logdir), "--episodes", "2",
                       "--envs", "2", "--out", str(tmp_path / "dataset"))
        assert recorded.returncode == 0, recorded.stderr[-3000:]
        assert (tmp_path / "dataset" / "spec.json").exists()
        done.append("record")
    if "plot" in after:
        plotted = cli("plot", str(logdir), "--out", str(tmp_path / "curves.png"))
        assert plotted.returncode == 0 and (tmp_path / "curves.png").stat().st_size > 0
        done.append("plot")
    if "resume" in after:
        resumed = run([*train[:-4], "--steps", "3000", "--resume"], tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "resumed from" in resumed.stdout + resumed.stderr
        env_steps = resumed.stdout.split("env steps:")[1].split()[0]
        assert int(env_steps.replace(",", "")) >= 3000
        done.append("resume")
    return done
