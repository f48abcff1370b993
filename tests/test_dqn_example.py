"""The DQN example (`examples/dqn.py`, docs/agents.md), trained from its script in process
and as local processes, then used from the command line by its import path (its Ray run
is in tests/test_ray_backend.py); and a last save that the stop cuts short, reported.
"""

from __future__ import annotations

import json

import pytest

from tests.example_runs import check_example, cli


@pytest.mark.parametrize("backend", ["inprocess", "local_mp"])
def test_the_dqn_example_is_used_from_the_command_line(tmp_path, backend):
    # Export and record here; plot and resume on the REINFORCE example's run.
    after = ("export", "record") if backend == "local_mp" else ()
    done = check_example(tmp_path, "dqn.py", backend, after)
    assert done == ["train", "eval", *after]
    if backend == "local_mp":  # the same refusal for any custom agent: checked once
        unnamed = cli("eval", "--logdir", str(tmp_path / "run"))  # says how to name it
        assert unnamed.returncode == 2 and "--agent package.module:Builder" in unnamed.stderr


def test_a_last_save_the_stop_cuts_short_is_reported_with_the_newest_checkpoint(tmp_path):
    # The learner's last save takes a minute, longer than local_mp's stop allows (10 s in
    # all): the learner is killed mid-save, and the run says so in its summary and status.
    logdir = tmp_path / "slow"
    ran = cli("train", "--agent", "tests.slow_save:SlowSaveDQN", "--backend", "local_mp",
              "--steps", "1200", "--logdir", str(logdir), "--checkpoint-every-s", "3600")
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ("WARNING: the learner's last checkpoint did not finish before the stop ended "
            "it; the newest is none") in ran.stdout
    record = logdir / "checkpoints" / "learner" / "final.json"
    assert json.loads(record.read_text()) == {"saved": False}
