"""Runners that step their environments in groups (double-buffered sampling).

Two groups must act exactly as lockstep does: every environment sees the same actions, so
the server writes the same unrolls and records the same episodes. The environment here
makes that checkable: its observations depend on the seed, the step and the last action
taken, so an action routed to the wrong environment (or one step late) changes
everything after it. The server, Reverb and (over gRPC) the transport are the real ones.
"""

from __future__ import annotations

import math
import threading
import time

import dm_env
import grpc
import numpy as np
import pytest
import tree
from dm_env import specs

from builders.vtrace import VTraceBuilder
from launch.experiment import AUTO_GROUPS_MIN_ENVS, Experiment
from seed_agents.inference import wire
from seed_agents.inference.batcher import DynamicBatcher
from seed_agents.inference.grpc_client import RemoteInference
from seed_agents.inference.grpc_service import InferenceService
from seed_agents.inference.protocol import FIRST
from seed_agents.inference.runner import EnvRunner, group_sizes
from seed_agents.inference.runner_process import RemoteRunner
from tests.test_inference_server import SPEC, Setup
from tests.test_inference_server import batch as step_batch

ROUNDS = 40
NUM_ENVS = 5  # Odd: groups of 3 and 2.


class EchoEnv(dm_env.Environment):
    """Observation [sin(0.7 seed + 1.3 t) + last action, t]; reward = last action + 0.1 t.

    Episodes last 3 + seed % 4 steps, one more every other episode, so the environments'
    episodes end at different rounds. Auto-resets after LAST, as runners expect.
    """

    def __init__(self, seed: int):
        self._seed = seed
        self._episode = 0
        self._t = 0
        self._last = None

    def _observation(self, action: int) -> np.ndarray:
        x = math.sin(0.7 * self._seed + 1.3 * self._t) + action
        return np.array([x, self._t], np.float32)

    def reset(self) -> dm_env.TimeStep:
        self._t = 0
        self._last = dm_env.restart(self._observation(0))
        return self._last

    def step(self, action) -> dm_env.TimeStep:
        if self._last is None or self._last.last():
            self._episode += 1
            return self.reset()
        self._t += 1
        action = int(action)
        observation = self._observation(action)
        reward = np.float32(action + 0.1 * self._t)
        if self._t >= 3 + self._seed % 4 + self._episode % 2:
            self._last = dm_env.termination(reward, observation)
        else:
            self._last = dm_env.transition(reward, observation)
        return self._last

    def observation_spec(self):
        return specs.Array((2,), np.float32)

    def action_spec(self):
        return specs.DiscreteArray(2, dtype=np.int32)


def _canonical(items) -> list[tuple]:
    """Unrolls as comparable values, in a fixed order (replay keeps no env ids)."""
    return sorted(tuple(np.asarray(leaf).tobytes() for leaf in tree.flatten(item))
                  for item in items)


def _episodes(stats) -> tuple[int, list]:
    """The server's finished episodes as (count, sorted (return, length) pairs): groups
    finish episodes in another order than lockstep."""
    saved = stats.save()
    return saved["episodes"], sorted(zip(saved["returns"], saved["lengths"], strict=True))


def _run_in_process(groups: int) -> tuple[list[tuple], dict, int]:
    setup = Setup(max_envs=NUM_ENVS, max_batch_size=NUM_ENVS, max_wait_ms=5.0)
    try:
        runner = EnvRunner(EchoEnv, NUM_ENVS, seed=3, groups=groups)
        names = [f"r/{g}" for g in range(groups)]
        for name, size in zip(names, runner.group_sizes, strict=True):
            setup.server.connect(name, size, run_id="one-runner")
        runner.run([setup.server.channel(name) for name in names], max_steps=ROUNDS)
        assert runner.rounds == ROUNDS and runner.env_steps == ROUNDS * NUM_ENVS
        return (_canonical(setup.items()), _episodes(setup.server.stats),
                setup.counter.get_counts()["env_steps"])
    finally:
        setup.close()


def test_two_groups_write_the_same_unrolls_and_episodes_as_lockstep():
    lockstep = _run_in_process(1)
    grouped = _run_in_process(2)
    items, episodes, env_steps = lockstep
    assert len(items) >= 10 and episodes[0] >= 20  # enough to compare
    assert grouped == lockstep


def test_two_groups_over_grpc_match_lockstep_and_leave_nothing_in_flight():
    def run(groups: int):
        setup = Setup(max_envs=NUM_ENVS, max_batch_size=NUM_ENVS, max_wait_ms=5.0)
        service = InferenceService(setup.server, SPEC, max_streams=4)
        service.start()
        try:
            runner = RemoteRunner(service.address, EchoEnv, NUM_ENVS, seed=3,
                                  runner_id="remote", groups=groups, timeout_s=30)
            try:
                runner.run(max_steps=ROUNDS)
            finally:
                runner.close()
            deadline = time.monotonic() + 60
            while setup.server.num_clients and time.monotonic() < deadline:
                time.sleep(0.01)
            assert setup.server.num_clients == 0  # every group's stream closed
            return _canonical(setup.items()), _episodes(setup.server.stats), runner.stats
        finally:
            service.stop(grace_s=0.2)
            setup.close()

    lock_items, lock_episodes, lock_stats = run(1)
    items, episodes, stats = run(2)
    assert items == lock_items and episodes == lock_episodes
    assert stats.rounds == lock_stats.rounds == ROUNDS
    assert stats.env_steps == ROUNDS * NUM_ENVS and stats.reconnects == 0


def test_a_stop_midway_leaves_the_runner_consistent():
    # A stop between groups ends the round early: env_steps counts what was stepped and
    # the group after the stop sends nothing more.
    setup = Setup(max_envs=NUM_ENVS, max_batch_size=NUM_ENVS, max_wait_ms=5.0)
    try:
        runner = EnvRunner(EchoEnv, NUM_ENVS, seed=0, groups=2)
        for g, size in enumerate(runner.group_sizes):
            setup.server.connect(f"r/{g}", size, run_id="one-runner")
        stop = threading.Event()
        channels = [setup.server.channel(f"r/{g}") for g in range(2)]

        class StopAfterFirstGroup:
            def __init__(self, channel):
                self.channel = channel

            def send(self, batch):
                self.channel.send(batch)

            def receive(self):
                actions = self.channel.receive()
                if runner.rounds == 2:
                    stop.set()
                return actions

        runner.run([StopAfterFirstGroup(channels[0]), channels[1]], stop)
        assert runner.rounds == 2 and runner.env_steps == 2 * NUM_ENVS + 3
    finally:
        setup.close()


def test_a_batch_waits_for_runners_not_for_each_group():
    # Two runners (callers "a" and "b"); "a" has both of its groups waiting. Counting
    # requests, the batch would close with a's two (2 requests >= 2 expected); counting
    # callers it waits for b, then takes all three at once.
    batches = []
    done = threading.Event()

    def process(payloads):
        batches.append(list(payloads))
        if sum(map(len, batches)) == 3:
            done.set()
        return payloads

    batcher = DynamicBatcher(process, max_batch_size=100, max_wait_s=120.0,
                             expected_requests=lambda: 2)
    try:
        answered = []
        for payload, caller in (("a0", "a"), ("a1", "a")):
            batcher.submit_nowait(payload, 1, lambda r, e: answered.append(r), caller)
        time.sleep(0.3)
        assert batches == []  # still waiting for runner b
        batcher.submit_nowait("b0", 1, lambda r, e: answered.append(r), "b")
        assert done.wait(60), "the batch did not close when every runner was in"
        assert batches == [["a0", "a1", "b0"]]
    finally:
        batcher.close()


def test_groups_are_validated_and_split_evenly():
    assert group_sizes(5, 2) == [3, 2] and group_sizes(4, 1) == [4]
    assert group_sizes(6, 3) == [2, 2, 2]
    with pytest.raises(ValueError, match="groups must be in"):
        EnvRunner(EchoEnv, 2, groups=3)
    with pytest.raises(ValueError, match="groups must be in"):
        group_sizes(4, 0)
    runner = EnvRunner(EchoEnv, 4, groups=2)
    with pytest.raises(ValueError, match="1 channels for 2 groups"):
        runner.run(lambda batch: np.zeros(4, np.int32), max_steps=1)
    with pytest.raises(ValueError, match="runner_groups must be in"):
        Experiment(VTraceBuilder(), "fake:obs=2", envs_per_runner=2, runner_groups=3)
    # The default: two groups where they measured faster (128+ environments per runner).
    def groups(**settings):
        return Experiment(VTraceBuilder(), "fake:obs=2", **settings).groups_per_runner

    assert groups(envs_per_runner=AUTO_GROUPS_MIN_ENVS) == 2
    assert groups(envs_per_runner=AUTO_GROUPS_MIN_ENVS - 1) == 1
    assert groups(envs_per_runner=AUTO_GROUPS_MIN_ENVS, runner_groups=1) == 1
    assert groups(envs_per_runner=4, runner_groups=2) == 2


def test_remote_inference_keeps_one_batch_in_flight():
    setup = Setup(max_envs=4, max_batch_size=4)
    service = InferenceService(setup.server, SPEC)
    service.start()
    try:
        hello = wire.hello_from_specs("r", "run", 2, specs.Array((2,), np.float32),
                                      specs.DiscreteArray(2, dtype=np.int32))
        with RemoteInference(service.address, hello, timeout_s=30) as remote:
            with pytest.raises(RuntimeError, match="without a batch in flight"):
                remote.receive()
            batch = step_batch([[0.5, 0], [-0.5, 0]], [FIRST, FIRST])
            remote.send(batch)
            with pytest.raises(RuntimeError, match="while a batch is in flight"):
                remote.send(batch)
            assert remote.receive().tolist() == [1, 0]
    except grpc.RpcError as error:  # pragma: no cover - reported with its status
        raise AssertionError(f"{error.code()}: {error.details()}") from error
    finally:
        service.stop(grace_s=0.2)
        setup.close()
