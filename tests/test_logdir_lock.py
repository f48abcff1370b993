"""One run at a time in a logdir: a second run there is refused and writes nothing."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.commands.cli import main as cli_main
from launch.experiment import Experiment
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.utils.logdir_lock import LOCK_FILE, LogdirInUseError, hold_logdir

SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))
_HOLDER = (
    "import sys\n"
    "from seed_agents.utils.logdir_lock import hold_logdir\n"
    "with hold_logdir(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.read()\n"  # until the test closes our stdin
)


@pytest.fixture
def held_logdir(tmp_path):
    """A logdir whose lock another live process holds (a run still training there)."""
    logdir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(logdir)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())
    try:
        assert holder.stdout.readline().strip() == "held"
        yield logdir, holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def _experiment(logdir, **changes) -> Experiment:
    settings = dict(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=15",
                    num_runners=1, envs_per_runner=2, max_env_steps=200, logdir=str(logdir))
    return Experiment(**{**settings, **changes})


@pytest.mark.parametrize("run", [run_inprocess, run_local_mp], ids=["inprocess", "local_mp"])
def test_a_run_in_a_logdir_another_run_holds_is_refused_and_writes_nothing(held_logdir, run):
    logdir, holder = held_logdir
    before = sorted(os.listdir(logdir))
    with pytest.raises(LogdirInUseError, match=f"pid {holder.pid}"):
        run(_experiment(logdir), stream=io.StringIO())
    assert sorted(os.listdir(logdir)) == before == [LOCK_FILE]


def test_the_command_line_says_so_in_one_line(held_logdir, capsys):
    logdir, _ = held_logdir
    code = cli_main(["train", "--agent", "vtrace", "--env", "fake:obs=4,len=15",
                     "--backend", "inprocess", "--steps", "200", "--logdir", str(logdir)])
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("seed-agents: error:") and "in use by another run" in error
    assert "Traceback" not in error


def test_the_lock_is_released_when_the_holder_ends_and_when_a_run_returns(tmp_path):
    logdir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(logdir)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # however the holder ends, the operating system lets go
    holder.wait(timeout=60)
    result = run_inprocess(_experiment(logdir), stream=io.StringIO())
    assert result.env_steps >= 200 and (logdir / "run.json").exists()
    with hold_logdir(logdir):  # the run let go as it returned
        pass
    # And a run in this process holds it while it runs: a nested hold is refused.
    with hold_logdir(logdir), pytest.raises(LogdirInUseError):
        with hold_logdir(logdir):
            pass


def test_a_url_or_no_logdir_is_not_locked():
    with hold_logdir(None), hold_logdir("gs://bucket/run"):
        pass  # nothing created, nothing refused
