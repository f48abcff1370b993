"""The DeepMind Control Suite as `dmc:<domain>-<task>` ids, e.g. `dmc:walker-walk`.

Each task is loaded with `dm_control.suite.load(domain, task, task_kwargs={"random":
seed})`; its dict of observations is flattened into one float32 vector (the order is the
suite's own, fixed per task), and its actions go through `CanonicalActions` (the suite's
bounds are [-1, 1] in float64: agents get float32). Episodes end the suite's way: a time
limit (1,000 steps for the benchmark tasks) is a LAST step with discount 1, so learners
bootstrap from its final observation. `dmc:walker-walk,repeat=2` holds each action for two
control steps (`ActionRepeat`), the pixel benchmarks' protocol (PlaNet, CURL, DrQ: 2 for
walker and finger, 4 for reacher and cheetah, 8 for cartpole); a step budget in env steps
is then twice the agent's steps.

dm_control (and MuJoCo) are imported on first use, so processes without control tasks
never load them. Without a display, MuJoCo's renderer is disabled (`MUJOCO_GL=disable`)
unless the environment names one (e.g. `MUJOCO_GL=egl` for headless rendering).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from seed_agents.envs.action_repeat import ActionRepeat
from seed_agents.envs.action_scaling import CanonicalActions
from seed_agents.envs.options import parse_options
from seed_agents.envs.wrapper import EnvironmentWrapper

_USAGE = ("expected 'dmc:<domain>-<task>[,repeat=N]', e.g. 'dmc:walker-walk' or "
          "'dmc:cheetah-run,repeat=2' (each action held for N control steps)")
_OPTIONS = {"repeat": ("repeat", int)}


def _suite() -> Any:
    if "DISPLAY" not in os.environ:
        # Otherwise dm_control tries GLFW at import and warns that there is no display.
        os.environ.setdefault("MUJOCO_GL", "disable")
    from dm_control import suite

    return suite


def _check_option(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def parse_dmc_options(rest: str) -> tuple[str, dict[str, Any]]:
    """(`<domain>-<task>`, options) of the part of an id after `dmc:`; options are
    `repeat` (the action repeat, 1 when not given)."""
    name, _, options = rest.partition(",")
    kwargs = parse_options(options, _OPTIONS, f"dmc:{rest}", _USAGE, check=_check_option)
    return name, {"repeat": 1, **kwargs}


def action_repeat_of(env_id: str) -> int:
    """The action repeat a `dmc:` id asks for (1 for any other id): how many environment
    steps each agent step is."""
    prefix, _, rest = env_id.partition(":")
    if prefix != "dmc":
        return 1
    return parse_dmc_options(rest)[1]["repeat"]


def parse_dmc_id(rest: str) -> tuple[str, str]:
    """(domain, task) of the part of an id after `dmc:`, checked against the suite (and
    its options checked: see `parse_dmc_options`).

    Raises:
      ValueError: For a malformed id or a task the suite does not have.
    """
    rest, _ = parse_dmc_options(rest)
    domain, sep, task = rest.partition("-")
    if not sep or not domain or not task:
        raise ValueError(f"Bad id 'dmc:{rest}': {_USAGE}.")
    tasks = _suite().ALL_TASKS
    if (domain, task) not in tasks:
        known = sorted(f"{d}-{t}" for d, t in tasks if d == domain)
        hint = f"; {domain}'s tasks: {', '.join(known)}" if known else ""
        raise ValueError(f"The Control Suite has no task {domain}-{task} ('dmc:{rest}')"
                         f"{hint}.")
    return domain, task


class FlatObservations(EnvironmentWrapper):
    """A dm_env whose observations are a dict of arrays, seen as one float32 vector."""

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        inner = environment.observation_spec()
        if not isinstance(inner, Mapping):
            raise TypeError(f"FlatObservations needs dict observations, got {inner!r}.")
        self._keys = list(inner)
        size = sum(int(np.prod(inner[key].shape)) for key in self._keys)
        self._spec = specs.Array((size,), np.float32, name="observation")

    def _flatten(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        observation = np.concatenate(
            [np.asarray(timestep.observation[key], np.float32).reshape(-1)
             for key in self._keys])
        reward = None if timestep.reward is None else np.float32(timestep.reward)
        discount = None if timestep.discount is None else np.float32(timestep.discount)
        return timestep._replace(observation=observation, reward=reward, discount=discount)

    def reset(self) -> dm_env.TimeStep:
        return self._flatten(self._environment.reset())

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._flatten(self._environment.step(action))

    def observation_spec(self) -> specs.Array:
        return self._spec

    def reward_spec(self) -> specs.Array:
        return specs.Array((), np.float32, name="reward")

    def discount_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


def make_dmc(rest: str, seed: int | None = None) -> dm_env.Environment:
    """The Control Suite task named by `rest` (`<domain>-<task>[,repeat=N]`), flattened,
    with canonical actions (and each action held for N control steps)."""
    domain, task = parse_dmc_id(rest)
    repeat = parse_dmc_options(rest)[1]["repeat"]
    environment = _suite().load(domain, task, task_kwargs={"random": seed})
    environment = CanonicalActions(FlatObservations(environment))
    return ActionRepeat(environment, repeat) if repeat > 1 else environment
