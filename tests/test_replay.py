"""Replay: tables, unroll assembly with overlap, writer back-pressure, datasets."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf
from dm_env import specs

from seed_agents.replay import (
    ReplayTimeoutError,
    UnrollAdder,
    UnrollWriter,
    make_dataset,
    prioritized_table,
    queue_table,
    row_spec,
    unroll_signature,
)
from seed_agents.replay import unrolls as u
from seed_agents.specs import EnvironmentSpec

SPEC = EnvironmentSpec(
    observations=specs.Array((3,), np.float32),
    actions=specs.DiscreteArray(2, dtype=np.int32),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
EXTRAS = {"logits": specs.Array((2,), np.float32)}
STATE = (specs.Array((1,), np.float32),)
T = 3


def _rows(values: np.ndarray) -> dict:
    """Rows for len(values) slots whose every field carries `values` (easy to trace)."""
    n = len(values)
    return {
        u.OBSERVATION: np.repeat(values[:, None], 3, axis=1).astype(np.float32),
        u.PREV_ACTION: values.astype(np.int32),
        u.REWARD: values.astype(np.float32),
        u.DISCOUNT: np.ones(n, np.float32),
        u.STEP_TYPE: np.ones(n, np.uint8),
        u.ACTION: values.astype(np.int32),
        u.EXTRAS: {"logits": np.repeat(values[:, None], 2, axis=1).astype(np.float32)},
    }


@pytest.fixture
def server():
    signature = unroll_signature(SPEC, T, EXTRAS, STATE)
    server = reverb.Server([queue_table("q", 100, signature)], port=None)
    yield server
    server.stop()


@pytest.fixture
def writer(server):
    """The test's writer on `server`, closed before the server stops (left to the garbage
    collector after that, its stream holds a collection for seconds)."""
    writer = UnrollWriter(server.localhost_client(), "q")
    yield writer
    writer.close()


def _drain(client: reverb.Client, table: str = "q") -> list[dict]:
    size = client.server_info()[table].current_size
    if not size:
        return []
    samples = client.sample(table, num_samples=size, emit_timesteps=False,
                            unpack_as_table_signature=True)
    return [s.data for s in samples]


def test_unrolls_overlap_by_one_row_and_keep_their_start_state(server, writer):
    client = server.localhost_client()
    adder = UnrollAdder(writer, num_slots=2, unroll_length=T, row_spec=row_spec(SPEC, EXTRAS),
                        state_spec=STATE)
    slots = np.array([0, 1])
    for step in range(2 * T + 1):  # two full unrolls per slot
        values = np.array([step, 100 + step], np.float64)
        adder.add(slots, _rows(values), (values[:, None].astype(np.float32) * 10,))
    writer.flush()
    items = _drain(client)
    assert len(items) == 4
    rewards = sorted(tuple(item[u.REWARD].tolist()) for item in items)
    assert rewards == [(0, 1, 2, 3), (3, 4, 5, 6), (100, 101, 102, 103), (103, 104, 105, 106)]
    for item in items:
        first_value = item[u.REWARD][0]
        # The start state is the state fed in at row 0, also for a carried-over row.
        np.testing.assert_allclose(item[u.START_STATE][0], [first_value * 10])
        np.testing.assert_allclose(item[u.OBSERVATION][:, 0], item[u.REWARD])
        assert item[u.OBSERVATION].shape == (T + 1, 3)


def test_reset_discards_partial_unrolls(server, writer):
    client = server.localhost_client()
    adder = UnrollAdder(writer, 2, T, row_spec(SPEC, EXTRAS), STATE)
    state = (np.zeros((1, 1), np.float32),)
    for step in range(T):  # one row short of a full unroll
        adder.add(np.array([1]), _rows(np.array([step])), state)
    adder.reset(np.array([1]))
    for step in range(T + 1):
        adder.add(np.array([1]), _rows(np.array([50 + step])), state)
    writer.flush()
    items = _drain(client)
    assert [item[u.REWARD].tolist() for item in items] == [[50, 51, 52, 53]]


def test_writer_copies_buffers_before_they_are_reused(server, writer):
    client = server.localhost_client()
    adder = UnrollAdder(writer, 1, T, row_spec(SPEC, EXTRAS), STATE)
    state = (np.zeros((1, 1), np.float32),)
    for step in range(T + 1 + 2):  # one written unroll, then rows 1..2 overwrite its buffer
        adder.add(np.array([0]), _rows(np.array([step])), state)
    writer.flush()
    (item,) = _drain(client)
    assert item[u.REWARD].tolist() == [0, 1, 2, 3]


def test_writer_closes_and_keeps_what_was_flushed(server, writer):
    client = server.localhost_client()
    adder = UnrollAdder(writer, 1, T, row_spec(SPEC, EXTRAS), STATE)
    for step in range(T + 1):
        adder.add(np.array([0]), _rows(np.array([step])), (np.zeros((1, 1), np.float32),))
    writer.flush()
    writer.close()  # dm-reverb 0.14's close() takes no `block=`: this raised TypeError
    writer.close()  # and a second close is a no-op
    assert [item[u.REWARD].tolist() for item in _drain(client)] == [[0, 1, 2, 3]]


def test_full_queue_blocks_writer_until_timeout():
    signature = unroll_signature(SPEC, T, EXTRAS)
    server = reverb.Server([queue_table("q", 1, signature)], port=None)
    try:
        writer = UnrollWriter(server.localhost_client(), "q", max_in_flight_items=1,
                              timeout_s=0.5)
        unroll = {k: np.zeros((T + 1, *np.shape(v)[1:]), np.asarray(v).dtype)
                  for k, v in _rows(np.zeros(1)).items() if k != u.EXTRAS}
        unroll[u.EXTRAS] = {"logits": np.zeros((T + 1, 2), np.float32)}
        writer.write(unroll)
        writer.write(unroll)  # the queue holds one: this one waits in flight
        start = time.monotonic()
        with pytest.raises(ReplayTimeoutError, match="confirmed no write"):
            writer.write(unroll)
        assert time.monotonic() - start >= 0.4
    finally:
        server.stop()


def test_stop_event_abandons_a_blocked_write():
    signature = unroll_signature(SPEC, T, EXTRAS)
    server = reverb.Server([queue_table("q", 1, signature)], port=None)
    stop = threading.Event()
    try:
        writer = UnrollWriter(server.localhost_client(), "q", max_in_flight_items=1,
                              timeout_s=60, stop_event=stop)
        unroll = {k: np.zeros((T + 1, *np.shape(v)[1:]), np.asarray(v).dtype)
                  for k, v in _rows(np.zeros(1)).items() if k != u.EXTRAS}
        unroll[u.EXTRAS] = {"logits": np.zeros((T + 1, 2), np.float32)}
        writer.write(unroll)
        threading.Timer(0.3, stop.set).start()
        start = time.monotonic()
        writer.write(unroll)
        writer.write(unroll)
        assert time.monotonic() - start < 5
    finally:
        server.stop()


def test_dataset_batches_unrolls_and_ends_on_timeout(server, writer):
    adder = UnrollAdder(writer, 4, T, row_spec(SPEC, EXTRAS), STATE)
    slots = np.arange(4)
    for step in range(T + 1):
        adder.add(slots, _rows(np.full(4, step)), (np.zeros((4, 1), np.float32),))
    writer.flush()
    dataset = make_dataset(f"localhost:{server.port}", "q", batch_size=2,
                           rate_limiter_timeout_ms=200)
    batches = list(dataset)  # two batches, then the empty queue times out: the dataset ends
    assert len(batches) == 2
    data = batches[0].data
    assert data[u.OBSERVATION].shape == (2, T + 1, 3)
    assert data[u.EXTRAS]["logits"].shape == (2, T + 1, 2)
    assert data[u.START_STATE][0].shape == (2, 1)


def test_dataset_keeps_the_partial_batch_before_a_timeout(server, writer):
    """A queue's sample removes the item: a partial batch dropped at the dataset's end
    would be experience lost."""
    adder = UnrollAdder(writer, 3, T, row_spec(SPEC, EXTRAS), STATE)
    for step in range(T + 1):
        adder.add(np.arange(3), _rows(np.full(3, step)), (np.zeros((3, 1), np.float32),))
    writer.flush()
    dataset = make_dataset(f"localhost:{server.port}", "q", batch_size=2,
                           rate_limiter_timeout_ms=200)
    assert [len(batch.info.key) for batch in dataset] == [2, 1]


def test_batches_carry_a_partial_batch_into_the_next_and_lose_no_unroll(server, writer):
    """Unrolls arrive in bursts (every environment of a runner ends one at the same step);
    a timeout between bursts must not cost the burst's rows, and the learner still gets
    full batches, oldest rows first."""
    from seed_agents.learning.batches import Batches

    adder = UnrollAdder(writer, 3, T, row_spec(SPEC, EXTRAS), STATE)
    state = (np.zeros((3, 1), np.float32),)

    def burst(first_step: int, steps: int) -> None:
        # Slot k's rows carry 100 k + step: an unroll's first observation names it.
        for step in range(first_step, first_step + steps):
            adder.add(np.arange(3), _rows(100 * np.arange(3) + step), state)
        writer.flush()

    def first_observations(batch) -> list[int]:
        return [int(x) for x in batch.data[u.OBSERVATION][:, 0, 0].numpy()]

    burst(0, T + 1)  # three unrolls, starting at step 0
    batches = Batches(make_dataset(f"localhost:{server.port}", "q", batch_size=2,
                                   rate_limiter_timeout_ms=50), 2)
    seen: list[int] = []
    tries = 0
    while len(seen) < 2 and tries < 100:  # counted tries: slow cores may time out first
        batch = batches.next()
        tries += 1
        if batch is not None:
            seen += first_observations(batch)
    for _ in range(100):  # the third unroll cannot fill a batch: only Nones, until it waits
        assert batches.next() is None
        if batches.carried:
            break
    assert batches.carried == 1
    burst(T + 1, T)  # three more, starting at step T (unrolls overlap by one row)
    while len(seen) < 6 and tries < 200:
        batch = batches.next()
        tries += 1
        if batch is not None:
            assert len(batch.info.key) == 2
            seen += first_observations(batch)
    assert sorted(seen) == [0, 3, 100, 103, 200, 203]  # each unroll once, none lost
    assert seen.index(200) == 2  # the carried row went first into the next batch
    assert batches.carried == 0
    batches.close()


def test_the_batch_carry_benchmark_prints_its_json_line():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "batch_carry.py"), "--batch", "4",
         "--shape", "3,2", "--batches", "3"],
        cwd=root, capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["bench"] == "batch_carry"  # timings measured, never asserted
    assert line["value"] >= 0 and line["baseline"] >= 0 and line["batch_mib"] >= 0
    assert {"ratio", "unit", "machine"} <= set(line)


def test_batches_take_the_batch_size_from_the_dataset_or_need_it():
    from seed_agents.learning.batches import Batches

    full = Batches(tf.data.Dataset.range(6).batch(2, drop_remainder=True))
    assert full.next().numpy().tolist() == [0, 1]
    full.close()
    with pytest.raises(ValueError, match="needs batch_size"):
        Batches(tf.data.Dataset.range(6).batch(2))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        Batches(tf.data.Dataset.range(6).batch(2), 0)


def test_batches_start_anew_after_a_timeout_and_destroy_the_spent_iterator_elsewhere(
        server, writer):
    """A timed-out iterator's destructor waits for its sample requests (seconds on busy
    cores): it runs on another thread, not in the learner's `next()`, whose stop it
    delayed."""
    import weakref

    from seed_agents.learning.batches import Batches

    adder = UnrollAdder(writer, 2, T, row_spec(SPEC, EXTRAS), STATE)
    seen = {}

    def add_one_unroll_per_slot():
        for step in range(T):
            adder.add(np.arange(2), _rows(np.full(2, step)), (np.zeros((2, 1), np.float32),))
        writer.flush()

    add_one_unroll_per_slot()
    add_one_unroll_per_slot()  # the first T rows close no unroll (it needs T + 1)
    batches = Batches(make_dataset(f"localhost:{server.port}", "q", batch_size=2,
                                   rate_limiter_timeout_ms=50), 2)
    assert batches.next() is not None
    destroyed = threading.Event()

    def record_thread():
        seen["thread"] = threading.current_thread().name
        destroyed.set()

    weakref.finalize(batches._iterator, record_thread)
    assert batches.next() is None  # the queue is empty: the sample timed out
    assert destroyed.wait(60)
    assert seen["thread"] != threading.current_thread().name
    add_one_unroll_per_slot()
    # A fresh iterator reads what came after; on slow cores the first fresh one may time
    # out before the data lands, so a few tries (counted, not timed).
    assert any(batches.next() is not None for _ in range(100))
    # The live iterator at close goes the same way: its destructor, which a rate limiter
    # can hold for seconds once nothing inserts, never runs on the stopping learner's
    # thread.
    destroyed.clear()
    weakref.finalize(batches._iterator, record_thread)
    batches.close()
    assert destroyed.wait(60)
    assert seen["thread"] != threading.current_thread().name
    with pytest.raises(RuntimeError, match="after close"):
        batches.next()


def test_table_factories_validate():
    with pytest.raises(ValueError, match="max_size"):
        queue_table("q", 0)
    with pytest.raises(ValueError, match="samples_per_insert"):
        prioritized_table("p", 10, samples_per_insert=0)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        prioritized_table("p", 10, min_size_to_sample=11)
    table = prioritized_table("p", 10, priority_exponent=0.6, samples_per_insert=2.0)
    info = reverb.Server([table], port=None)
    try:
        assert info.localhost_client().server_info()["p"].max_size == 10
    finally:
        info.stop()


def test_adder_rejects_bad_sizes():
    with pytest.raises(ValueError, match="unroll_length"):
        UnrollAdder(lambda unroll: None, 1, 0, row_spec(SPEC, EXTRAS))
    with pytest.raises(ValueError, match="num_slots"):
        UnrollAdder(lambda unroll: None, 0, 3, row_spec(SPEC, EXTRAS))
