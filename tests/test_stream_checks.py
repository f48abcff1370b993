"""What the inference service checks and keeps per stream and per peer: the step-type
order of each environment, the summarised rejection log, and the batcher's early close
that ignores idle callers."""

from __future__ import annotations

import itertools
import logging
import queue
import time

import numpy as np
import pytest

from seed_agents.inference.batcher import BatcherClosedError, DynamicBatcher
from seed_agents.inference.rejections import RejectionLog, peer_host
from seed_agents.inference.step_types import StepOrderError, StepTypeTracker

FIRST, MID, LAST = 0, 1, 2
_ALLOWED_AFTER = {None: {FIRST}, FIRST: {MID, LAST}, MID: {MID, LAST}, LAST: {FIRST}}


def steps(*values) -> np.ndarray:
    return np.array(values, np.uint8)


# -- step types ---------------------------------------------------------------------------


def test_every_transition_of_one_environment():
    for previous, current in itertools.product([None, FIRST, MID, LAST], [FIRST, MID, LAST]):
        tracker = StepTypeTracker(1)
        if previous is not None:  # reach `previous` through a valid path
            path = {FIRST: [FIRST], MID: [FIRST, MID], LAST: [FIRST, LAST]}[previous]
            for step in path:
                tracker.check(steps(step))
        if current in _ALLOWED_AFTER[previous]:
            tracker.check(steps(current))
        else:
            with pytest.raises(StepOrderError, match="environment 0"):
                tracker.check(steps(current))


def test_environments_are_tracked_apart_and_a_rejected_batch_changes_nothing():
    tracker = StepTypeTracker(3)
    with pytest.raises(StepOrderError, match="environment 2: the first step batch of a "
                                             "stream must have every step_type FIRST"):
        tracker.check(steps(FIRST, FIRST, MID))
    tracker.check(steps(FIRST, FIRST, FIRST))
    tracker.check(steps(LAST, MID, MID))
    with pytest.raises(StepOrderError, match=r"environment 0: step_type MID after LAST "
                                             r"\(MID must follow FIRST or MID\)"):
        tracker.check(steps(MID, MID, MID))
    tracker.check(steps(FIRST, LAST, MID))  # the rejected batch did not advance anything
    with pytest.raises(StepOrderError, match=r"environment 1: step_type LAST after LAST"):
        tracker.check(steps(MID, LAST, MID))
    with pytest.raises(StepOrderError, match=r"environment 2: step_type FIRST after MID "
                                             r"\(FIRST must follow LAST"):
        tracker.check(steps(MID, FIRST, FIRST))
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        StepTypeTracker(0)


# -- the rejection log --------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "rejections"]


def test_first_rejection_is_logged_then_summarised_per_interval(caplog):
    caplog.set_level(logging.WARNING, logger="rejections")
    clock = Clock()
    log = RejectionLog(logging.getLogger("rejections"), interval_s=10.0, clock=clock)
    for port in range(100):
        log.reject(f"ipv4:10.0.0.1:{5000 + port}", "UNAUTHENTICATED", "wrong token")
    log.reject("ipv6:[::1]:6000", "INVALID_ARGUMENT", "bad magic")
    assert len(messages(caplog)) == 2  # one per peer so far
    log.flush()  # nothing due yet
    assert len(messages(caplog)) == 2
    clock.now = 10.0
    log.flush()
    lines = messages(caplog)
    assert len(lines) == 3
    assert lines[2] == ("Rejected 99 more streams from ipv4:10.0.0.1 in the last 10 s "
                        "(UNAUTHENTICATED 99); the last: UNAUTHENTICATED: wrong token")
    log.reject("ipv4:10.0.0.1:7000", "UNAUTHENTICATED", "wrong token")  # a new interval
    assert len(messages(caplog)) == 4
    assert log.rejected == {"UNAUTHENTICATED": 101, "INVALID_ARGUMENT": 1}


def test_the_log_tracks_a_bounded_number_of_peers(caplog):
    caplog.set_level(logging.WARNING, logger="rejections")
    log = RejectionLog(logging.getLogger("rejections"), interval_s=60.0, max_peers=2,
                       clock=Clock())
    for _ in range(3):
        log.reject("ipv4:10.0.0.1:1", "UNAUTHENTICATED", "x")
    log.reject("ipv4:10.0.0.2:1", "UNAUTHENTICATED", "x")
    log.reject("ipv4:10.0.0.3:1", "UNAUTHENTICATED", "x")  # evicts 10.0.0.1: its summary
    assert len(log._peers) == 2
    assert "Rejected 2 more streams from ipv4:10.0.0.1" in messages(caplog)[-2]
    log.flush(force=True)
    assert len(log._peers) == 0


def test_peer_host_folds_ports():
    assert peer_host("ipv4:127.0.0.1:5432") == "ipv4:127.0.0.1"
    assert peer_host("ipv6:[::1]:5432") == "ipv6:[::1]"
    assert peer_host("unix:/tmp/x.sock") == "unix:/tmp/x.sock"


# -- the batcher --------------------------------------------------------------------------


def test_submit_nowait_calls_back_with_results_and_errors():
    def process(payloads):
        if "boom" in payloads:
            raise RuntimeError("boom")
        return [p.upper() for p in payloads]

    batcher = DynamicBatcher(process, max_batch_size=4, max_wait_s=0.01)
    answers: queue.Queue = queue.Queue()

    def callback(result, error):
        answers.put((result, error))

    try:
        batcher.submit_nowait("a", 1, callback)
        assert answers.get(timeout=30) == ("A", None)
        batcher.submit_nowait("boom", 1, callback)
        result, error = answers.get(timeout=30)
        assert result is None and str(error) == "boom"
    finally:
        batcher.close()
    with pytest.raises(BatcherClosedError):
        batcher.submit_nowait("late", 1, callback)


def test_callers_silent_longer_than_the_window_hold_no_batch_back():
    # Ten callers are connected and a batch may wait 30 s for them; only callers seen in
    # the last 0.2 s are expected. A test that breaks the rule takes 30 s per request.
    batcher = DynamicBatcher(lambda p: p, max_batch_size=64, max_wait_s=30.0,
                             expected_requests=lambda: 10, active_window_s=0.2)
    try:
        assert batcher.expected_callers() == 0
        start = time.monotonic()
        assert batcher.submit("a", caller="a") == "a"  # the only caller seen: no wait
        # "b" is the second caller seen; "a" is expected until it has been silent 0.2 s,
        # then the batch closes without it.
        assert batcher.submit("b", caller="b") == "b"
        assert time.monotonic() - start < 15.0
        deadline = time.monotonic() + 30
        while batcher.expected_callers() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.expected_callers() == 0
    finally:
        batcher.close()
