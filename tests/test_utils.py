"""Tests for seed_agents.utils: counters, rate tracking and loggers."""

from __future__ import annotations

import csv
import gc
import io
import threading
import warnings

import numpy as np
import pytest

from seed_agents.utils import counting, loggers
from seed_agents.utils.gc_tuning import SERVER_THRESHOLDS, gc_for_serving

# --- Counter -------------------------------------------------------------------------


def test_counter_is_exact_under_concurrency():
    parent = counting.Counter()
    child = counting.Counter(parent, prefix="actor")
    n_threads, n_increments = 8, 10_000
    start = threading.Barrier(n_threads)

    def work():
        start.wait()  # Maximise contention: everyone starts together.
        for _ in range(n_increments):
            child.increment(env_steps=1, episodes=0.5)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    total = n_threads * n_increments
    assert child.get_counts() == {"env_steps": total, "episodes": total / 2}
    assert parent.get_counts() == {"actor_env_steps": total, "actor_episodes": total / 2}


def test_counter_increment_returns_snapshot_and_keeps_ints():
    counter = counting.Counter()
    assert counter.increment(steps=2) == {"steps": 2}
    snapshot = counter.increment(steps=3, loss=0.5)
    assert snapshot == {"steps": 5, "loss": 0.5}
    assert isinstance(snapshot["steps"], int)
    snapshot["steps"] = 100  # A copy: editing it must not change the counter.
    assert counter.get_counts()["steps"] == 5


def test_counter_parent_forwarding_with_prefixes():
    root = counting.Counter()
    learner = counting.Counter(root, prefix="learner")
    actor = counting.Counter(root, prefix="actor")
    passthrough = counting.Counter(root)

    learner.increment(steps=1)
    learner.increment(steps=1)
    actor.increment(steps=10, episodes=1)
    passthrough.increment(batches=3)

    assert learner.get_counts() == {"steps": 2}
    assert actor.get_counts() == {"steps": 10, "episodes": 1}
    assert root.get_counts() == {
        "learner_steps": 2,
        "actor_steps": 10,
        "actor_episodes": 1,
        "batches": 3,
    }


def test_counter_forwarding_chains_through_levels():
    root = counting.Counter()
    mid = counting.Counter(root, prefix="a")
    leaf = counting.Counter(mid, prefix="b")
    leaf.increment(x=1)
    assert mid.get_counts() == {"b_x": 1}
    assert root.get_counts() == {"a_b_x": 1}


def test_counter_save_restore():
    parent = counting.Counter()
    counter = counting.Counter(parent, prefix="learner")
    counter.increment(steps=7, time=1.5)
    state = counter.save()

    restored = counting.Counter()
    restored.restore(state)
    assert restored.get_counts() == {"steps": 7, "time": 1.5}
    restored.increment(steps=1)
    assert restored.get_counts()["steps"] == 8
    assert counter.get_counts()["steps"] == 7  # The saved state is not shared.

    # Restoring does not replay counts into the parent.
    counter.restore({"counts": {"steps": 100}})
    assert counter.get_counts() == {"steps": 100}
    assert parent.get_counts() == {"learner_steps": 7, "learner_time": 1.5}


# --- RateTracker ---------------------------------------------------------------------


def test_rate_tracker_constant_rate():
    tracker = counting.RateTracker(window_s=5.0)
    assert tracker.update(0, now=0.0) == 0.0  # One sample: no rate yet.
    for t in range(1, 21):
        rate = tracker.update(100 * t, now=float(t))
    assert rate == pytest.approx(100.0)
    assert tracker.rate == rate


def test_rate_tracker_follows_recent_window():
    tracker = counting.RateTracker(window_s=2.0)
    count = 0
    for t in range(11):  # 10 s at 1,000 counts/s.
        count = 1000 * t
        tracker.update(count, now=float(t))
    for t in range(11, 21):  # Then 10 s at 10 counts/s.
        count += 10
        rate = tracker.update(count, now=float(t))
    # An all-time average would be ~505/s; the window sees only the slow phase.
    assert rate == pytest.approx(10.0)


def test_rate_tracker_resets_when_count_goes_backwards():
    tracker = counting.RateTracker(window_s=10.0)
    tracker.update(1000, now=0.0)
    tracker.update(2000, now=1.0)
    assert tracker.update(0, now=2.0) == 0.0
    assert tracker.update(50, now=3.0) == pytest.approx(50.0)


def test_rate_tracker_rejects_bad_window():
    with pytest.raises(ValueError):
        counting.RateTracker(window_s=0)


# --- Formatting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [
        (9812, "9,812"),
        (1_234_567, "1,234,567"),
        (np.int64(42), "42"),
        (9812.3, "9,812"),
        (123.4321, "123.4"),
        (np.float32(0.5), "0.5"),
        (0.0012345, "0.001234"),
        (float("nan"), "nan"),
        (True, "True"),
        ("abc", "abc"),
    ],
)
def test_format_value(value, text):
    assert loggers.format_value(value) == text


def test_progress_bar():
    assert loggers.progress_bar(0.45) == "[#########...........]  45%"
    assert loggers.progress_bar(0.0) == "[....................]   0%"
    assert loggers.progress_bar(1.7) == "[####################] 100%"


# --- TerminalLogger ------------------------------------------------------------------


def test_terminal_logger_throttles_until_forced():
    stream = io.StringIO()
    logger = loggers.TerminalLogger(label="learner", print_every_s=1e9, stream=stream)
    logger.write({"steps": 1})
    logger.write({"steps": 2})
    logger.write({"steps": 3})
    assert stream.getvalue() == "learner steps=1\n"

    logger.flush()  # Prints the latest held-back row.
    assert stream.getvalue().splitlines() == ["learner steps=1", "learner steps=3"]
    logger.flush()  # Nothing pending now.
    assert len(stream.getvalue().splitlines()) == 2

    logger.write({"steps": 4}, force=True)
    logger.write({"steps": 5})
    logger.close()  # Close flushes the final row.
    assert stream.getvalue().splitlines()[-2:] == ["learner steps=4", "learner steps=5"]


def test_terminal_logger_prints_every_row_when_unthrottled():
    stream = io.StringIO()
    logger = loggers.TerminalLogger(print_every_s=0.0, stream=stream)
    for i in range(3):
        logger.write({"i": i})
    assert stream.getvalue() == "i=0\ni=1\ni=2\n"


def test_terminal_logger_progress_bar_and_formatting():
    stream = io.StringIO()
    logger = loggers.TerminalLogger(label="actor", total=100_000, stream=stream)
    data = {"env_steps": 45_000, "mean_return": np.float32(123.4), "steps_per_s": 9812.4}
    original = dict(data)
    logger.write(data)
    assert stream.getvalue() == (
        "[#########...........]  45% actor env_steps=45,000 mean_return=123.4 steps_per_s=9,812\n"
    )
    assert data == original  # Not mutated.


def test_terminal_logger_no_bar_without_progress_key():
    stream = io.StringIO()
    logger = loggers.TerminalLogger(total=100, stream=stream)
    logger.write({"loss": 0.25})
    assert stream.getvalue() == "loss=0.25\n"


def test_terminal_logger_keys_select_and_order():
    stream = io.StringIO()
    logger = loggers.TerminalLogger(stream=stream, keys=["b", "missing", "a"])
    logger.write({"a": 1, "b": 2, "c": 3})
    assert stream.getvalue() == "b=2 a=1\n"


class _FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_logger_redraws_on_tty_and_ends_with_newline():
    stream = _FakeTTY()
    logger = loggers.TerminalLogger(print_every_s=0.0, stream=stream)
    logger.write({"x": 1})
    logger.write({"x": 2})
    assert "\n" not in stream.getvalue()
    assert stream.getvalue().count("\r") == 2
    logger.close()
    assert stream.getvalue().endswith("x=2\x1b[K\n")


# --- CSVLogger -----------------------------------------------------------------------


def _read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_csv_logger_header_rows_and_missing_keys(tmp_path):
    directory = tmp_path / "logs" / "run1"  # Created on demand.
    logger = loggers.CSVLogger(directory, label="learner")
    logger.write({"steps": np.int64(1), "loss": np.float32(0.5)})
    logger.write({"steps": 2})
    # Flushed after each write: readable before close.
    fieldnames, rows = _read_csv(directory / "learner.csv")
    assert fieldnames == ["steps", "loss"]
    assert rows == [{"steps": "1", "loss": "0.5"}, {"steps": "2", "loss": ""}]
    logger.close()
    logger.close()  # Idempotent.


def test_csv_logger_drops_new_keys_with_one_warning(tmp_path):
    logger = loggers.CSVLogger(tmp_path, label="actor")
    logger.write({"a": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = {"a": 2, "b": 3}
        logger.write(data)
        logger.write({"a": 3, "b": 4})
        logger.write({"a": 4, "b": 5, "c": 6})
    assert data == {"a": 2, "b": 3}  # Not mutated.
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "'b'" in messages[0] and "'c'" not in messages[0]
    assert "'c'" in messages[1] and "'b'" not in messages[1]
    logger.close()
    fieldnames, rows = _read_csv(tmp_path / "actor.csv")
    assert fieldnames == ["a"]
    assert [r["a"] for r in rows] == ["1", "2", "3", "4"]


# --- Dispatcher, NoOp, default -------------------------------------------------------


class _Recorder(loggers.Logger):
    def __init__(self):
        self.rows = []
        self.closed = False

    def write(self, data):
        self.rows.append(data)

    def close(self):
        self.closed = True


def test_dispatcher_fans_out():
    a, b = _Recorder(), _Recorder()
    dispatcher = loggers.Dispatcher([a, b])
    dispatcher.write({"x": 1})
    dispatcher.close()
    assert a.rows == b.rows == [{"x": 1}]
    assert a.closed and b.closed


def test_dispatcher_closes_all_even_if_one_fails():
    class _Failing(_Recorder):
        def close(self):
            raise RuntimeError("boom")

    good = _Recorder()
    dispatcher = loggers.Dispatcher([_Failing(), good])
    with pytest.raises(RuntimeError, match="boom"):
        dispatcher.close()
    assert good.closed


def test_noop_logger():
    logger = loggers.NoOpLogger()
    logger.write({"x": 1})
    logger.close()


def test_make_default_logger(tmp_path):
    stream = io.StringIO()
    logger = loggers.make_default_logger("eval", stream=stream)
    assert isinstance(logger, loggers.TerminalLogger)

    logger = loggers.make_default_logger(
        "eval", directory=str(tmp_path), total=10, print_every_s=1e9, stream=stream
    )
    logger.write({"env_steps": 5, "r": 1.0})
    logger.write({"env_steps": 10, "r": 2.0})  # Throttled on the terminal, not in CSV.
    logger.close()
    assert stream.getvalue().splitlines() == [
        "[##########..........]  50% eval env_steps=5 r=1",
        "[####################] 100% eval env_steps=10 r=2",
    ]
    _, rows = _read_csv(tmp_path / "eval.csv")
    assert rows == [{"env_steps": "5", "r": "1.0"}, {"env_steps": "10", "r": "2.0"}]


# --- gc_for_serving ------------------------------------------------------------------


def test_gc_for_serving_freezes_collects_less_and_restores():
    before = gc.get_threshold()
    with gc_for_serving():
        assert gc.get_threshold() == SERVER_THRESHOLDS
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_gc_for_serving_leaves_a_callers_own_freeze_in_place():
    gc.freeze()
    try:
        frozen_by_caller = gc.get_freeze_count()
        assert frozen_by_caller > 0
        with gc_for_serving():
            pass
        assert gc.get_freeze_count() >= frozen_by_caller
    finally:
        gc.unfreeze()


def test_the_service_loop_is_uvloops_unless_asyncios_is_asked_for(monkeypatch):
    import asyncio

    import uvloop

    from seed_agents.utils.event_loops import ENV_VAR, new_event_loop

    monkeypatch.delenv(ENV_VAR, raising=False)
    for uvloops in (True, False):
        loop = new_event_loop()
        try:
            assert isinstance(loop, uvloop.Loop) is uvloops
            assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
        finally:
            loop.close()
        monkeypatch.setenv(ENV_VAR, "asyncio")
    monkeypatch.setenv(ENV_VAR, "tokio")
    with pytest.raises(ValueError, match="'uvloop' or 'asyncio'"):
        new_event_loop()
