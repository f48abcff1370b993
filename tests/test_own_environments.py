"""A user's own environments as they are (int64 action ids, float64 actions and
observations, python-float rewards, no auto-reset), trained from a script in process and
as local processes (and on Ray in tests/test_ray_backend.py, with every Ray of the tests).

The script runs as a user's would: `python my_envs.py`, its classes in `__main__` (in
`__mp_main__` in local_mp's spawned nodes, pickled by value to Ray's workers).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.example_runs import run

BACKENDS = ["inprocess", "local_mp"]

ENVIRONMENTS = '''
import sys

import dm_env
import numpy as np
from dm_env import specs

from builders.sac import SACBuilder
from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.backends.ray import run_ray
from launch.experiment import Experiment
from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.vtrace.config import VTraceConfig


class Corridor(dm_env.Environment):
    """int64 action ids (`DiscreteArray(dtype=int)`), float64 observations, float rewards."""

    def __init__(self, seed):
        self._t = 0

    def _observation(self):
        return np.full(3, self._t, np.float64)

    def reset(self):
        self._t = 0
        return dm_env.restart(self._observation())

    def step(self, action):
        if type(action) is not np.int64 or action not in (0, 1):
            raise TypeError(f"Corridor takes np.int64 ids 0 or 1, got {action!r}")
        self._t += 1
        reward = float(action)
        if self._t == 10:
            return dm_env.termination(reward, self._observation())
        return dm_env.transition(reward, self._observation())

    def observation_spec(self):
        return specs.Array((3,), np.float64)

    def action_spec(self):
        return specs.DiscreteArray(2, dtype=int)


class Reacher(dm_env.Environment):
    """float64 actions within [-2, 2] and observations, as dm_control declares them."""

    def __init__(self, seed):
        self._t = 0

    def reset(self):
        self._t = 0
        return dm_env.restart(np.zeros(2, np.float64))

    def step(self, action):
        if action.dtype != np.float64 or not np.all(np.abs(action) <= 2.0):
            raise TypeError(f"Reacher takes float64 actions in [-2, 2], got {action!r}")
        self._t += 1
        observation = np.asarray(action, np.float64)
        if self._t == 20:
            return dm_env.truncation(-float(np.sum(action**2)), observation)
        return dm_env.transition(-float(np.sum(action**2)), observation)

    def observation_spec(self):
        return specs.Array((2,), np.float64)

    def action_spec(self):
        return specs.BoundedArray((2,), np.float64, -2.0, 2.0)


if __name__ == "__main__":
    backend, logdir = sys.argv[1], sys.argv[2]
    run = {"inprocess": run_inprocess, "local_mp": run_local_mp,
           "ray": lambda e: run_ray(e, node_ip_address="127.0.0.2", num_cpus=4)}[backend]
    agents = {
        "corridor": (VTraceBuilder(VTraceConfig(unroll_length=5, batch_size=2, queue_size=8,
                                                hidden_sizes=(8,))), Corridor, 400),
        "reacher": (SACBuilder(SACConfig(actor_hidden_sizes=(8,), critic_hidden_sizes=(8,),
                                         batch_size=8, min_replay_size=32,
                                         samples_per_insert=2.0, replay_size=1000)),
                    Reacher, 200),
    }
    for name, (builder, factory, steps) in agents.items():
        result = run(Experiment(builder, factory, num_runners=1, envs_per_runner=2,
                                max_env_steps=steps, logdir=f"{logdir}/{name}",
                                evaluate_every_s=None, log_every_s=5.0))
        print(f"{name}: env_steps={result.env_steps} learner_steps={result.learner_steps}")
'''


def _counts(stdout: str, name: str) -> dict[str, int]:
    line = next(line for line in stdout.splitlines() if line.startswith(f"{name}:"))
    return {k: int(v) for k, v in (part.split("=") for part in line.split()[1:])}


def check_own_environments(tmp_path: Path, backend: str) -> None:
    """Runs the user's script on `backend`; both agents trained on their environments."""
    script = tmp_path / "my_envs.py"
    script.write_text(textwrap.dedent(ENVIRONMENTS))
    ran = run([sys.executable, str(script), backend, str(tmp_path / "runs")], tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    for name, steps in (("corridor", 400), ("reacher", 200)):
        counts = _counts(ran.stdout, name)
        assert counts["env_steps"] >= steps and counts["learner_steps"] > 0, counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_discrete_and_float64_continuous_environments_train_as_they_are(
        tmp_path, backend):
    check_own_environments(tmp_path, backend)
