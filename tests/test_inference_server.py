"""The central inference server against a real Reverb server and a real (numpy) policy."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import reverb
from dm_env import specs

from seed_agents.inference.protocol import FIRST, LAST, MID, StepBatch
from seed_agents.inference.server import InferenceConfig, InferenceServer
from seed_agents.replay import UnrollAdder, UnrollWriter, queue_table, row_spec, unroll_signature
from seed_agents.replay import unrolls as u
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter
from tests.policies import CountingPolicy

SPEC = EnvironmentSpec(
    observations=specs.Array((2,), np.float32),
    actions=specs.DiscreteArray(2, dtype=np.int32),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
T = 4


class Setup:
    def __init__(self, max_envs=8, max_batch_size=8, max_wait_ms=2.0, **config):
        self.policy = CountingPolicy()
        signature = unroll_signature(SPEC, T, self.policy.extras_spec, self.policy.state_spec)
        self.replay = reverb.Server([queue_table("q", 1000, signature)], port=None)
        self.client = self.replay.localhost_client()
        self.writer = UnrollWriter(self.client, "q")
        adder = UnrollAdder(self.writer, max_envs, T, row_spec(SPEC, self.policy.extras_spec),
                            self.policy.state_spec)
        self.counter = Counter()
        self.server = InferenceServer(
            self.policy, SPEC, adder,
            InferenceConfig(max_envs=max_envs, max_batch_size=max_batch_size,
                            max_wait_ms=max_wait_ms, **config),
            counter=self.counter,
        )

    def items(self) -> list[dict]:
        self.writer.flush()
        size = self.client.server_info()["q"].current_size
        if not size:
            return []
        samples = self.client.sample("q", num_samples=size, emit_timesteps=False,
                                     unpack_as_table_signature=True)
        return [s.data for s in samples]

    def close(self):
        self.server.close()
        self.writer.close()  # before its server stops
        self.replay.stop()


@pytest.fixture
def setup():
    s = Setup()
    yield s
    s.close()


def batch(obs, step_type, reward=None, discount=None) -> StepBatch:
    k = len(step_type)
    return StepBatch(
        observation=np.asarray(obs, np.float32).reshape(k, 2),
        reward=np.asarray(reward if reward is not None else np.ones(k), np.float32),
        discount=np.asarray(discount if discount is not None else np.ones(k), np.float32),
        step_type=np.asarray(step_type, np.uint8),
    )


def test_actions_state_and_unrolls_follow_the_steps(setup):
    setup.server.connect("a", 2)
    obs = [[1, 0], [-1, 0]]
    actions = setup.server.step("a", batch(obs, [FIRST, FIRST], reward=[0, 0]))
    np.testing.assert_array_equal(actions, [1, 0])
    for _ in range(T):
        setup.server.step("a", batch(obs, [MID, MID]))
    items = setup.items()
    assert len(items) == 2
    for item in items:
        assert item[u.STEP_TYPE].tolist() == [FIRST, MID, MID, MID, MID]
        assert item[u.REWARD].tolist() == [0, 1, 1, 1, 1]
        # The previous action is 0 at FIRST, then the action taken at the row before.
        assert item[u.PREV_ACTION][1:].tolist() == item[u.ACTION][:-1].tolist()
        assert item[u.PREV_ACTION][0] == 0
        np.testing.assert_array_equal(item[u.START_STATE][0], [0.0])  # reset at FIRST
    assert setup.counter.get_counts()["env_steps"] == 2 * T


def test_state_resets_at_first_and_episodes_are_recorded(setup):
    setup.server.connect("a", 1)
    setup.server.step("a", batch([[1, 0]], [FIRST], reward=[0]))
    setup.server.step("a", batch([[1, 0]], [MID], reward=[2]))
    setup.server.step("a", batch([[1, 0]], [LAST], reward=[3], discount=[0]))
    setup.server.step("a", batch([[1, 0]], [FIRST], reward=[0]))
    setup.server.step("a", batch([[1, 0]], [MID], reward=[1]))  # row 4: the unroll is full
    summary = setup.server.stats.summary()
    assert summary["episodes"] == 1
    assert summary["mean_return"] == 5.0
    assert summary["mean_length"] == 2.0
    (item,) = setup.items()
    assert item[u.STEP_TYPE].tolist() == [FIRST, MID, LAST, FIRST, MID]
    assert item[u.DISCOUNT].tolist() == [1, 1, 0, 1, 1]
    # The next unroll starts at row 4, whose fed-in state counted one step since FIRST.
    for _ in range(T):
        setup.server.step("a", batch([[1, 0]], [MID]))
    items = setup.items()
    np.testing.assert_array_equal(items[0][u.START_STATE][0], [1.0])


def test_disconnect_discards_partial_unrolls_and_frees_slots(setup):
    setup.server.connect("a", 8)
    setup.server.step("a", batch(np.ones((8, 2)), [FIRST] * 8, reward=np.zeros(8)))
    setup.server.step("a", batch(np.ones((8, 2)), [MID] * 8))
    setup.server.disconnect("a")
    with pytest.raises(ValueError, match="Unknown client"):
        setup.server.step("a", batch(np.ones((8, 2)), [MID] * 8))
    setup.server.connect("b", 8)  # every slot is free again
    setup.server.step("b", batch(np.ones((8, 2)), [FIRST] * 8, reward=np.zeros(8)))
    for _ in range(T):
        setup.server.step("b", batch(np.ones((8, 2)), [MID] * 8))
    items = setup.items()
    assert len(items) == 8
    for item in items:  # nothing of client "a" leaked into "b"'s unrolls
        assert item[u.STEP_TYPE].tolist() == [FIRST, MID, MID, MID, MID]


def test_reconnecting_with_a_new_run_id_starts_fresh(setup):
    setup.server.connect("a", 2, run_id="run-1")
    setup.server.step("a", batch(np.ones((2, 2)), [FIRST] * 2, reward=np.zeros(2)))
    setup.server.step("a", batch(np.ones((2, 2)), [MID] * 2))
    setup.server.connect("a", 2, run_id="run-2")  # the runner process restarted
    setup.server.step("a", batch(np.ones((2, 2)), [FIRST] * 2, reward=np.zeros(2)))
    for _ in range(T):
        setup.server.step("a", batch(np.ones((2, 2)), [MID] * 2))
    items = setup.items()
    assert len(items) == 2
    assert all(item[u.STEP_TYPE][0] == FIRST for item in items)


def test_mis_shaped_input_is_rejected_before_batching(setup):
    setup.server.connect("a", 2)
    good = batch(np.ones((2, 2)), [FIRST] * 2)
    bad = [
        (StepBatch(np.ones((2, 3), np.float32), good.reward, good.discount, good.step_type),
         "observation"),
        (StepBatch(np.ones((2, 2), np.float64), good.reward, good.discount, good.step_type),
         "observation"),
        (StepBatch(good.observation, np.ones(3, np.float32), good.discount, good.step_type),
         "reward"),
        (StepBatch(good.observation, good.reward, good.discount, np.array([0, 7], np.uint8)),
         "step_type"),
    ]
    for step_batch, field in bad:
        with pytest.raises(ValueError, match=field):
            setup.server.step("a", step_batch)
    assert setup.policy.calls == 0
    np.testing.assert_array_equal(setup.server.step("a", good), [1, 1])


def test_connect_beyond_capacity_fails_clearly(setup):
    setup.server.connect("a", 6)
    with pytest.raises(ValueError, match="slots are free"):
        setup.server.connect("b", 3)
    with pytest.raises(ValueError, match="num_envs"):
        setup.server.connect("c", 0)


def test_clients_get_the_lowest_contiguous_ascending_slots_after_others_leave():
    # A runner restarted mid-run gets one ascending run of slots whenever one is free,
    # so that frame stacks shift in place (`FrameStacks.push`) rather than being gathered.
    setup = Setup(max_envs=16, max_batch_size=16)
    try:
        connect = setup.server.connect
        assert connect("a", 4).tolist() == [0, 1, 2, 3]
        assert connect("b", 4).tolist() == [4, 5, 6, 7]
        assert connect("c", 4).tolist() == [8, 9, 10, 11]
        setup.server.disconnect("b")
        setup.server.disconnect("a")
        assert connect("d", 6).tolist() == [0, 1, 2, 3, 4, 5]
        assert connect("e", 2).tolist() == [6, 7]
        assert connect("f", 3).tolist() == [12, 13, 14]  # The first run of 3 free.
        setup.server.disconnect("d")
        setup.server.disconnect("f")
        # No run of 9 is free (0-5 and 12-15): the lowest free slots, ascending.
        assert connect("g", 9).tolist() == [0, 1, 2, 3, 4, 5, 12, 13, 14]
        np.testing.assert_array_equal(
            setup.server.step("g", batch(np.zeros((9, 2)), [FIRST] * 9)), [0] * 9)
        with pytest.raises(ValueError, match="1 of max_envs=16 slots are free"):
            connect("h", 2)
    finally:
        setup.close()


def test_many_runner_threads_are_batched_together():
    setup = Setup(max_envs=64, max_batch_size=64, max_wait_ms=50.0)
    try:
        num_runners, k, steps = 8, 8, 30
        for r in range(num_runners):
            setup.server.connect(f"r{r}", k)
        errors = []

        def run(r):
            try:
                step_type = [FIRST] * k
                for _ in range(steps):
                    actions = setup.server.step(f"r{r}", batch(np.full((k, 2), r - 3.5),
                                                               step_type))
                    assert actions.tolist() == [int(r - 3.5 > 0)] * k
                    step_type = [MID] * k
            except Exception as error:  # noqa: BLE001
                errors.append(error)

        threads = [threading.Thread(target=run, args=(r,)) for r in range(num_runners)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert setup.counter.get_counts()["env_steps"] == num_runners * k * (steps - 1)
        # Every runner is known to the batcher, so batches close as soon as all are in.
        assert max(setup.policy.batch_sizes) > k
        assert len(setup.policy.batch_sizes) < num_runners * steps
    finally:
        setup.close()
