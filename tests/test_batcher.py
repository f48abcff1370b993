"""The dynamic batcher: batch limits, waits, errors, shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from seed_agents.inference.batcher import BatcherClosedError, DynamicBatcher


def _echo_sizes(seen: list[list[int]]):
    def process(payloads):
        seen.append(list(payloads))
        return [p * 10 for p in payloads]

    return process


def _submit_all(batcher, payloads, size=1):
    results = {}

    def call(p):
        results[p] = batcher.submit(p, size=size)

    threads = [threading.Thread(target=call, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_a_lone_request_is_served_after_max_wait():
    seen: list = []
    batcher = DynamicBatcher(_echo_sizes(seen), max_batch_size=64, max_wait_s=0.05)
    try:
        start = time.monotonic()
        assert batcher.submit(3) == 30
        elapsed = time.monotonic() - start
        assert 0.04 <= elapsed < 2.0
    finally:
        batcher.close()


def test_batches_never_exceed_max_size_and_all_results_return():
    seen: list = []
    batcher = DynamicBatcher(_echo_sizes(seen), max_batch_size=4, max_wait_s=0.05)
    try:
        results = _submit_all(batcher, list(range(10)), size=2)
        assert results == {p: p * 10 for p in range(10)}
        assert all(len(batch) * 2 <= 4 for batch in seen)
        assert sorted(p for batch in seen for p in batch) == list(range(10))
    finally:
        batcher.close()


def test_batch_closes_when_every_expected_caller_is_waiting():
    seen: list = []
    batcher = DynamicBatcher(_echo_sizes(seen), max_batch_size=1000, max_wait_s=30.0,
                             expected_requests=lambda: 3)
    try:
        start = time.monotonic()
        results = _submit_all(batcher, [1, 2, 3])
        assert time.monotonic() - start < 5.0  # far below max_wait_s
        assert results == {1: 10, 2: 20, 3: 30}
        assert sorted(len(b) for b in seen) in ([3], [1, 2], [1, 1, 1])
    finally:
        batcher.close()


def test_errors_reach_every_caller_of_the_batch_and_serving_continues():
    def process(payloads):
        if "bad" in payloads:
            raise ValueError("bad payload")
        return payloads

    batcher = DynamicBatcher(process, max_batch_size=8, max_wait_s=0.01)
    try:
        with pytest.raises(ValueError, match="bad payload"):
            batcher.submit("bad")
        assert batcher.submit("good") == "good"
    finally:
        batcher.close()


def test_close_fails_waiting_requests_and_refuses_new_ones():
    release = threading.Event()

    def slow(payloads):
        release.wait(5)
        return payloads

    batcher = DynamicBatcher(slow, max_batch_size=1, max_wait_s=0.0)
    errors = []

    def call(p):
        try:
            batcher.submit(p)
        except BatcherClosedError as error:
            errors.append(error)

    first = threading.Thread(target=call, args=(1,))
    first.start()
    time.sleep(0.1)  # 1 is being processed
    second = threading.Thread(target=call, args=(2,))
    second.start()
    time.sleep(0.1)  # 2 is queued
    closer = threading.Thread(target=batcher.close)
    closer.start()
    time.sleep(0.1)  # closed while 1 is still being processed
    release.set()
    for t in (first, second, closer):
        t.join(10)
    assert len(errors) == 1  # 1 was served; 2, still queued at close, failed
    with pytest.raises(BatcherClosedError):
        batcher.submit(3)


def test_invalid_configuration_is_rejected():
    with pytest.raises(ValueError, match="max_batch_size"):
        DynamicBatcher(lambda p: p, max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait_s"):
        DynamicBatcher(lambda p: p, max_batch_size=1, max_wait_s=-1)
