"""The environment runner: steps K environments, asks a policy server for their actions.

A runner holds no network parameters and imports neither TensorFlow nor Reverb (numpy
and the environments only), so it starts fast and stays small. Its loop is SEED's: infer,
step, repeat. How `infer` reaches the server (a direct call, a gRPC stream) is not its
business.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import dm_env
import numpy as np

from seed_agents.envs.registry import EnvironmentFactory
from seed_agents.inference.protocol import StepBatch
from seed_agents.utils.counting import (
    Figures,
    LatencyHistogram,
    RateReporter,
    delta,
    percentile_ms,
    ratio,
    share,
)

Infer = Callable[[StepBatch], np.ndarray]


class EnvRunner:
    """K environments stepped in lockstep; their results travel as one `StepBatch`.

    Environments follow dm_env's auto-reset convention: stepping after a LAST timestep
    starts a new episode (the action is ignored), so a LAST step costs one extra round
    trip per episode and keeps the final observation for bootstrapping.

    It times its own loop (`figures()`): seconds spent waiting for actions (`infer_s`),
    seconds stepping environments (`env_s`) and each round trip in a `LatencyHistogram`,
    two clock reads per round, so that a slow environment and a slow server are told apart.
    """

    def __init__(self, environment_factory: EnvironmentFactory, num_envs: int, seed: int = 0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self.envs = [environment_factory(seed + i) for i in range(num_envs)]
        spec = self.envs[0].observation_spec()
        self._batch = StepBatch(
            observation=np.zeros((num_envs, *spec.shape), spec.dtype),
            reward=np.zeros(num_envs, np.float32),
            discount=np.ones(num_envs, np.float32),
            step_type=np.zeros(num_envs, np.uint8),
        )
        self.rounds = 0  # Round trips completed: each stepped every environment once.
        self.infer_s = 0.0  # Time in `infer`: the round trip, as this runner sees it.
        self.env_s = 0.0  # Time stepping the environments.
        self.round_trip = LatencyHistogram()

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    @property
    def env_steps(self) -> int:
        return self.rounds * len(self.envs)

    def _record(self, i: int, timestep: dm_env.TimeStep) -> None:
        batch = self._batch
        batch.observation[i] = timestep.observation
        batch.reward[i] = 0.0 if timestep.reward is None else timestep.reward
        batch.discount[i] = 1.0 if timestep.discount is None else timestep.discount
        batch.step_type[i] = timestep.step_type

    def run(
        self,
        infer: Infer,
        stop_event: threading.Event | None = None,
        max_steps: int | None = None,
    ) -> None:
        """Steps until `stop_event` is set or `max_steps` more rounds are done.

        The batch arrays are reused every round: `infer` must be done with them when it
        returns (the inference server copies what it keeps).
        """
        stop_event = stop_event or threading.Event()
        for i, env in enumerate(self.envs):
            self._record(i, env.reset())
        end = None if max_steps is None else self.rounds + max_steps
        record = self.round_trip.record
        now = time.monotonic()
        while not stop_event.is_set() and (end is None or self.rounds < end):
            actions = infer(self._batch)
            answered = time.monotonic()
            for i, env in enumerate(self.envs):
                self._record(i, env.step(actions[i]))
            stepped = time.monotonic()
            self.infer_s += answered - now
            self.env_s += stepped - answered
            record(answered - now)
            now = stepped
            self.rounds += 1

    def figures(self) -> dict[str, Any]:
        """Cumulative figures for a `RateReporter` (see `runner_rates`)."""
        return {"env_steps": self.env_steps, "infer_s": self.infer_s, "env_s": self.env_s,
                "round_trip": self.round_trip.snapshot(), "bad_actions": self.bad_actions}

    @property
    def bad_actions(self) -> int:
        """Actions that were NaN or outside [-1, 1] and were clipped before reaching an
        environment (see `CanonicalActions`), over all K environments; 0 for discrete."""
        return sum(getattr(env, "bad_actions", 0) for env in self.envs)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def runner_rates(before: Figures, after: Figures) -> dict[str, float]:
    """A runner's row: its throughput and where its time went, between two readings.

    round_trip_* is the runner's view (send to actions received, transport included);
    inference_wait_frac and env_frac are the shares of wall time spent waiting for
    actions and stepping environments (the rest is the loop itself); env_ms_per_step is
    the cost of one environment step.
    """
    seconds = after["time"] - before["time"]
    steps = delta(before, after, "env_steps")
    return {
        "env_steps": after.get("env_steps", 0),
        "interval_s": seconds,
        "env_steps_per_s": ratio(steps, seconds),
        "round_trip_p50_ms": percentile_ms(before, after, "round_trip", 50),
        "round_trip_p99_ms": percentile_ms(before, after, "round_trip", 99),
        "inference_wait_frac": share(delta(before, after, "infer_s"), seconds),
        "env_frac": share(delta(before, after, "env_s"), seconds),
        "env_ms_per_step": 1000 * ratio(delta(before, after, "env_s"), steps),
        "reconnects": after.get("reconnects", 0),
        "bad_actions": after.get("bad_actions", 0),
    }


def runner_reporter(
    read: Callable[[], Figures], logdir: str | os.PathLike[str], runner_id: str,
    log_every_s: float = 5.0,
) -> RateReporter:
    """A started `RateReporter` writing `runner_rates` rows to `<logdir>/<runner_id>.csv`.

    CSV only: a runner process has no TensorFlow for TensorBoard, and a console line per
    runner would drown a program's console; the learner's rates row is the central view.
    The file is appended to, so a restarted runner continues its predecessor's file.
    """
    from seed_agents.utils.loggers import CSVLogger

    label = re.sub(r"[^A-Za-z0-9_.-]", "_", runner_id)
    return RateReporter(read, runner_rates, CSVLogger(logdir, label, append=True),
                        log_every_s=log_every_s, name=f"rates-{label}").start()
