"""The environment runner: steps K environments, asks a policy server for their actions.

A runner holds no network parameters and imports neither TensorFlow nor Reverb (numpy
and the environments only), so it starts fast and stays small. Its loop is SEED's: infer,
step, repeat. How a request reaches the server (a direct call, a gRPC stream) is not its
business: it talks to an `InferenceChannel` per group of environments.

Lockstep (one group) leaves the runner idle for each whole round trip. With two groups
(Sample Factory's double-buffered sampling) one group's environments step while the
other's actions are being computed: the same episodes and unrolls, the wait hidden
behind the stepping.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

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


class InferenceChannel(Protocol):
    """One group's way to the server: a request out, later its actions back.

    `send` must not block on the answer; `receive` blocks until the actions for the last
    `send` arrive (or raises). Between the two the runner leaves the batch untouched, so a
    channel may keep a reference to it instead of a copy until it is answered.
    """

    def send(self, batch: StepBatch) -> None: ...

    def receive(self) -> np.ndarray: ...


class BlockingChannel:
    """An `InferenceChannel` over a blocking `infer(batch) -> actions` call.

    The call happens in `receive`, so nothing overlaps: with one group it is exactly the
    lockstep loop, and with several it computes what the overlapped loop would, which is
    what tests compare against.
    """

    def __init__(self, infer: Infer):
        self._infer = infer
        self._batch: StepBatch | None = None

    def send(self, batch: StepBatch) -> None:
        self._batch = batch

    def receive(self) -> np.ndarray:
        batch, self._batch = self._batch, None
        if batch is None:
            raise RuntimeError("receive() without a send().")
        return self._infer(batch)


def group_sizes(num_envs: int, groups: int) -> list[int]:
    """How `num_envs` environments split into `groups` groups, as evenly as possible."""
    if not 1 <= groups <= num_envs:
        raise ValueError(f"groups must be in [1, num_envs={num_envs}], got {groups}.")
    base, extra = divmod(num_envs, groups)
    return [base + (g < extra) for g in range(groups)]


class _Group:
    """A contiguous range of the runner's environments and the batch they fill."""

    def __init__(self, envs: Sequence[dm_env.Environment], spec: Any):
        self.envs = envs
        n = len(envs)
        self.batch = StepBatch(
            observation=np.zeros((n, *spec.shape), spec.dtype),
            reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32),
            step_type=np.zeros(n, np.uint8),
        )
        self.sent = 0.0  # When its request left: the round trip's start.

    def record(self, i: int, timestep: dm_env.TimeStep) -> None:
        batch = self.batch
        batch.observation[i] = timestep.observation
        batch.reward[i] = 0.0 if timestep.reward is None else timestep.reward
        batch.discount[i] = 1.0 if timestep.discount is None else timestep.discount
        batch.step_type[i] = timestep.step_type


class EnvRunner:
    """K environments in `groups` groups; each group's results travel as one `StepBatch`.

    Environments follow dm_env's auto-reset convention: stepping after a LAST timestep
    starts a new episode (the action is ignored), so a LAST step costs one extra round
    trip per episode and keeps the final observation for bootstrapping. Environment i is
    made with seed `seed + i` and belongs to the same group (a contiguous range, see
    `group_sizes`) whatever the number of groups.

    It times its own loop (`figures()`): seconds spent waiting for actions (`infer_s`),
    seconds stepping environments (`env_s`) and each group's round trip (request sent to
    actions received) in a `LatencyHistogram`, so that a slow environment and a slow
    server are told apart. With two groups the round trip overlaps the other group's
    stepping, and `infer_s` is only the part of it that was not hidden.
    """

    def __init__(self, environment_factory: EnvironmentFactory, num_envs: int, seed: int = 0,
                 groups: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        sizes = group_sizes(num_envs, groups)
        self.envs = [environment_factory(seed + i) for i in range(num_envs)]
        spec = self.envs[0].observation_spec()
        bounds = np.cumsum([0, *sizes]).tolist()
        self._groups = [_Group(self.envs[a:b], spec)
                        for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        self.rounds = 0  # Rounds completed: each stepped every environment once.
        self.env_steps = 0  # Environment steps taken (a stop may end a round midway).
        self.infer_s = 0.0  # Time blocked waiting for actions.
        self.env_s = 0.0  # Time stepping the environments.
        self.round_trip = LatencyHistogram()
        self.round_trip_s = 0.0  # The round trips' sum, for their mean.

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    @property
    def group_sizes(self) -> list[int]:
        """Environments per group, in order: one channel (one server client) each."""
        return [len(group.envs) for group in self._groups]

    def run(
        self,
        infer: Infer | Sequence[InferenceChannel],
        stop_event: threading.Event | None = None,
        max_steps: int | None = None,
    ) -> None:
        """Steps until `stop_event` is set or `max_steps` more rounds are done.

        `infer` is one channel per group, in `group_sizes` order, or for a single group a
        blocking `infer(batch) -> actions` call. Each group's batch arrays are reused: a
        channel must be done with them when `receive` returns (the inference server copies
        what it keeps). A stop may leave requests of other groups unanswered; closing
        their channels is the caller's business.
        """
        channels = [BlockingChannel(infer)] if callable(infer) else list(infer)
        if len(channels) != len(self._groups):
            raise ValueError(f"{len(channels)} channels for {len(self._groups)} groups.")
        stop_event = stop_event or threading.Event()
        end = None if max_steps is None else self.rounds + max_steps
        pairs = list(zip(self._groups, channels, strict=True))
        for group, _ in pairs:
            for i, env in enumerate(group.envs):
                group.record(i, env.reset())
        if stop_event.is_set() or (end is not None and self.rounds >= end):
            return
        for group, channel in pairs:
            group.sent = time.monotonic()
            channel.send(group.batch)
        record = self.round_trip.record
        while True:
            last = end is not None and self.rounds + 1 >= end
            for group, channel in pairs:
                if stop_event.is_set():
                    return
                waiting = time.monotonic()
                actions = channel.receive()
                answered = time.monotonic()
                for i, env in enumerate(group.envs):
                    group.record(i, env.step(actions[i]))
                stepped = time.monotonic()
                self.infer_s += answered - waiting
                self.env_s += stepped - answered
                self.env_steps += len(group.envs)
                record(answered - group.sent)
                self.round_trip_s += answered - group.sent
                # As in lockstep, the results of a run's last step are not sent: no
                # request is left for the server to answer after the loop ends.
                if not (last or stop_event.is_set()):
                    group.sent = stepped
                    channel.send(group.batch)
            self.rounds += 1
            if last:
                return

    def figures(self) -> dict[str, Any]:
        """Cumulative figures for a `RateReporter` (see `runner_rates`)."""
        return {"env_steps": self.env_steps, "infer_s": self.infer_s, "env_s": self.env_s,
                "round_trip": self.round_trip.snapshot(), "round_trip_s": self.round_trip_s,
                "bad_actions": self.bad_actions}

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
