"""Observability: latency histograms, the batcher's and runners' figures, the rates rows,
TensorBoard events, and the rates files a real run leaves in its logdir."""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.experiment import Experiment, RunResult
from launch.limiter import SUMMARY_RATES, program_rates, program_status
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.envs import environment_factory
from seed_agents.inference.batcher import DynamicBatcher
from seed_agents.inference.runner import EnvRunner, runner_rates
from seed_agents.replay.stats import replay_figures
from seed_agents.utils import loggers
from seed_agents.utils.counting import Counter, LatencyHistogram, RateReporter, delta, share

SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))
RATE_KEYS = (
    "env_steps_per_s", "inference_batches_per_s", "mean_batch_size", "round_trip_p50_ms",
    "round_trip_p99_ms", "inference_queue_wait_ms", "inference_busy_frac",
    "learner_steps_per_s", "learner_samples_per_s", "replay_size", "replay_inserts_per_s",
    "replay_samples_per_s", "replay_sample_wait_frac", "replay_insert_wait_frac",
)
RUNNER_KEYS = ("env_steps_per_s", "round_trip_p50_ms", "round_trip_p99_ms",
               "inference_wait_frac", "env_frac", "env_ms_per_step")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _tb_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every event file in `directory`."""
    import tensorflow as tf

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(str(directory / "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
    return scalars


# --- figures and rates -----------------------------------------------------------------


def test_histogram_percentiles_of_a_known_distribution_and_of_an_interval():
    histogram = LatencyHistogram()
    assert math.isnan(histogram.percentile(50))
    values = np.linspace(0.001, 0.1, 1000)  # 1 ms .. 100 ms, evenly
    for value in values:
        histogram.record(float(value))
    for q in (50, 90, 99):
        assert histogram.percentile(q) == pytest.approx(np.percentile(values, q), rel=0.03)
    # An interval's percentiles count only what was recorded in it.
    before = histogram.snapshot()
    for _ in range(100):
        histogram.record(2.0)
    assert histogram.percentile(50, since=before) == pytest.approx(2.0, rel=0.06)
    assert histogram.percentile(50) < 0.1  # the whole run: still the first 1,000
    # Out of range values are clamped to the bounds, not lost.
    edges = LatencyHistogram(min_s=1e-3, max_s=1.0)
    edges.record(1e-6)
    edges.record(50.0)
    assert edges.percentile(0) == pytest.approx(1e-3)
    assert edges.percentile(100) == pytest.approx(1.0)


def test_delta_and_share_edge_cases():
    assert delta({}, {"n": 5}, "n") == 5  # a count that had not started grew from 0
    assert math.isnan(delta({"n": 5}, {}, "n"))  # nothing read: no figure
    assert math.isnan(delta({"n": 5}, {"n": 3}, "n"))  # a restart: the interval is unknown
    assert share(3.0, 2.0) == 1.0 and share(1.0, 4.0) == 0.25
    assert math.isnan(share(math.nan, 1.0))


def test_batcher_counts_batches_items_queue_waits_and_round_trips():
    def process(payloads):
        time.sleep(0.01)
        return payloads

    # Every request alone in its batch (one expected caller): the batch sizes are known.
    batcher = DynamicBatcher(process, max_batch_size=100, max_wait_s=1.0,
                             expected_requests=lambda: 1)
    try:
        for size in (2, 4, 6, 8):
            batcher.submit(size, size=size)
        stats = batcher.stats()
    finally:
        batcher.close()
    assert stats["batches"] == 4 and stats["requests"] == 4 and stats["items"] == 20
    assert stats["items"] / stats["batches"] == 5.0
    assert 0.04 <= stats["process_s"] < 0.5
    assert 0 <= stats["queue_wait_s"] < 0.2  # closed at once: nobody else was expected
    p50 = LatencyHistogram().percentile(50, counts=stats["round_trip"])
    assert 0.009 <= p50 < 0.1  # the 10 ms policy call, plus a little
    # A lone request with more callers expected waits out max_wait_s in the queue.
    batcher = DynamicBatcher(lambda p: p, max_batch_size=100, max_wait_s=0.05)
    try:
        batcher.submit(1)
        assert 0.04 <= batcher.stats()["queue_wait_s"] < 1.0
    finally:
        batcher.close()


def test_program_rates_from_two_readings():
    histogram = LatencyHistogram()
    before = {"time": 10.0, "env_steps": 1_000, "learner_steps": 10, "learner_samples": 200,
              "inference_batches": 100, "inference_items": 1_600, "inference_requests": 200,
              "inference_queue_wait_s": 0.2, "inference_process_s": 1.0,
              "inference_round_trip": histogram.snapshot(), "replay_size": 5,
              "replay_inserts": 50, "replay_samples": 40, "replay_sample_wait_ms": 0,
              "replay_insert_wait_ms": 100}
    for _ in range(98):
        histogram.record(0.002)
    histogram.record(0.05)
    histogram.record(0.05)
    after = {**before, "time": 12.0, "env_steps": 3_000, "learner_steps": 30,
             "learner_samples": 600, "inference_batches": 150, "inference_items": 3_600,
             "inference_requests": 300, "inference_queue_wait_s": 0.3,
             "inference_process_s": 2.0, "inference_round_trip": histogram.snapshot(),
             "replay_size": 7, "replay_inserts": 70, "replay_samples": 50,
             "replay_sample_wait_ms": 500, "replay_insert_wait_ms": 100}
    rates = program_rates(before, after)
    assert rates["env_steps_per_s"] == 1_000
    assert rates["inference_batches_per_s"] == 25
    assert rates["mean_batch_size"] == 40  # 2,000 items in 50 batches
    assert rates["inference_queue_wait_ms"] == pytest.approx(1.0)  # 0.1 s over 100 requests
    assert rates["inference_busy_frac"] == pytest.approx(0.5)
    assert rates["round_trip_p50_ms"] == pytest.approx(2.0, rel=0.06)
    assert rates["round_trip_p99_ms"] == pytest.approx(50.0, rel=0.06)
    assert rates["learner_steps_per_s"] == 10 and rates["learner_samples_per_s"] == 200
    assert rates["replay_size"] == 7
    assert rates["replay_inserts_per_s"] == 10 and rates["replay_samples_per_s"] == 5
    assert rates["replay_sample_wait_frac"] == pytest.approx(0.25)
    assert rates["replay_insert_wait_frac"] == 0
    # Without central inference (local mode) the same keys come back, as NaN.
    local = program_rates({"time": 0.0}, {"time": 1.0, "env_steps": 10})
    assert set(local) == set(rates) and math.isnan(local["mean_batch_size"])
    # The status carries them, but its counts are the counter's, never a stale reading's.
    counter = Counter()
    counter.increment(env_steps=5_000)
    status = program_status(counter, {"episodes": 3}, rates)
    assert status["env_steps"] == 5_000 and status["mean_batch_size"] == 40


def test_runner_times_its_round_trips_and_environment_steps():
    runner = EnvRunner(environment_factory("fake:obs=4,len=50"), num_envs=4)

    inside: list[float] = []  # what each call took, timed by the call itself

    def infer(batch):
        start = time.monotonic()
        time.sleep(0.005)
        inside.append(time.monotonic() - start)
        return np.zeros(4, np.int32)

    before = {**runner.figures(), "time": time.monotonic()}
    runner.run(infer, max_steps=20)
    after = {**runner.figures(), "time": time.monotonic()}
    runner.close()
    rates = runner_rates(before, after)
    assert after["env_steps"] == 80
    # The runner's clock agrees with the calls' own (however slow this machine sleeps):
    # it times the whole call, so never less, and within the run's wall time.
    assert sum(inside) <= after["infer_s"] <= after["time"] - before["time"]
    assert sum(inside) >= 20 * 0.005
    # The histogram's buckets are a few percent wide; its median is the calls' median.
    assert rates["round_trip_p50_ms"] == pytest.approx(1000 * np.median(inside), rel=0.25)
    assert rates["env_steps_per_s"] > 0 and 0 < rates["inference_wait_frac"] <= 1.0


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class _ListLogger(loggers.Logger):
    def __init__(self):
        self.rows: list[dict] = []
        self.closed = False

    def write(self, data):
        self.rows.append(dict(data))

    def close(self):
        self.closed = True


def test_rate_reporter_logs_rows_keeps_the_overall_rate_and_survives_errors():
    count = {"n": 0}
    fail = threading.Event()

    def read():
        if fail.is_set():
            raise RuntimeError("server gone")
        count["n"] += 10
        return {"n": count["n"]}

    def derive(before, after):
        return {"n_per_s": (after["n"] - before["n"]) / (after["time"] - before["time"])}

    logger = _ListLogger()
    stderr = io.StringIO()
    reporter = RateReporter(read, derive, logger, log_every_s=0.2, sample_every_s=0.05)
    reporter.start()
    _wait_for(lambda: len(logger.rows) >= 1, "a first row")
    assert logger.rows[0]["n_per_s"] > 0
    assert reporter.overall["n_per_s"] > 0 and reporter.latest == logger.rows[-1]
    rows = len(logger.rows)
    with contextlib.redirect_stderr(stderr):
        fail.set()
        _wait_for(lambda: "server gone" in stderr.getvalue(), "the failed read's report")
        time.sleep(0.3)  # more reads fail: reported once, nothing logged, the thread lives on
        fail.clear()
        time.sleep(0.1)
        reporter.close()
    assert stderr.getvalue().count("server gone") == 1
    assert len(logger.rows) > rows and logger.closed  # close logged the last interval


def test_tensorboard_logger_writes_scalars_at_the_rows_steps(tmp_path):
    logger = loggers.TensorBoardLogger(tmp_path, "rates", step_key="env_steps")
    logger.write({"env_steps": 100, "rate": 1.5, "name": "text", "missing": float("nan")})
    logger.write({"env_steps": 250, "rate": 2.5, "flag": True})
    logger.close()
    scalars = _tb_scalars(tmp_path / "tb" / "rates")
    assert scalars["rate"] == [(100, 1.5), (250, 2.5)]
    assert scalars["env_steps"] == [(100, 100.0), (250, 250.0)]
    assert "name" not in scalars and "missing" not in scalars and "flag" not in scalars
    # Throttled: rows closer together than every_s are dropped.
    throttled = loggers.TensorBoardLogger(tmp_path, "learner", step_key="learner_steps",
                                          every_s=60.0)
    for step in range(5):
        throttled.write({"learner_steps": step, "loss": float(step)})
    throttled.close()
    assert _tb_scalars(tmp_path / "tb" / "learner")["loss"] == [(0, 0.0)]
    # make_default_logger adds TensorBoard next to the terminal and the CSV file.
    stream = io.StringIO()
    logger = loggers.make_default_logger("train", tmp_path, stream=stream, tensorboard=True,
                                         print_every_s=0.0)
    logger.write({"env_steps": 7, "mean_return": 3.0})
    logger.close()
    assert _tb_scalars(tmp_path / "tb" / "train")["mean_return"] == [(7, 3.0)]
    assert (tmp_path / "train.csv").exists() and "mean_return=3" in stream.getvalue()


def test_terminal_logger_without_redraw_prints_whole_lines_on_a_tty():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    logger = loggers.TerminalLogger("rates", print_every_s=0.0, stream=stream, redraw=False)
    logger.write({"a": 1})
    logger.close()
    assert stream.getvalue() == "\r\x1b[Krates a=1\n"


def test_replay_figures_of_a_reverb_server():
    import reverb

    server = reverb.Server([reverb.Table.queue("q", 10)], port=None)
    try:
        client = server.localhost_client()
        for _ in range(3):
            client.insert(np.zeros(2, np.float32), {"q": 1.0})
        list(client.sample("q", 1))
        figures = replay_figures(client)
    finally:
        server.stop()
    assert figures["replay_size"] == 2
    assert figures["replay_inserts"] == 3 and figures["replay_samples"] == 1
    assert figures["replay_sample_wait_ms"] >= 0 and figures["replay_insert_wait_ms"] >= 0
    assert replay_figures(client) == {}  # the server is gone: no reading, no error


def test_summary_shows_the_main_rates():
    rates = {k: 1.0 for k in SUMMARY_RATES}
    result = RunResult(env_steps=10, episodes=1, mean_return=1.0, wall_s=1.0,
                       learner_steps=1, steps_per_s=10.0, logdir=None, rates=rates)
    summary = result.summary()
    assert "mean batch 1.0 envs" in summary and "p99 1.00 ms" in summary
    assert "learner: 1.0 steps/s" in summary and "replay: 1 items" in summary
    bare = RunResult(env_steps=10, episodes=1, mean_return=1.0, wall_s=1.0,
                     learner_steps=1, steps_per_s=10.0, logdir=None)
    assert "inference:" not in bare.summary()


# --- real runs -------------------------------------------------------------------------


def _check_rates_files(logdir: Path) -> None:
    rows = _rows(logdir / "rates.csv")
    assert rows and set(RATE_KEYS) <= set(rows[0])
    # The row written at shutdown may cover an interval after the runners stopped: judge
    # a row from while the program acted.
    last = max(rows, key=lambda row: float(row["env_steps_per_s"] or 0))
    for key in ("env_steps_per_s", "inference_batches_per_s", "mean_batch_size",
                "round_trip_p50_ms", "round_trip_p99_ms", "replay_inserts_per_s"):
        assert float(last[key]) > 0, (key, last)
    assert 1 <= float(last["mean_batch_size"]) <= 8  # 2 runners x 4 envs
    assert float(last["round_trip_p50_ms"]) <= float(last["round_trip_p99_ms"])
    scalars = _tb_scalars(logdir / "tb" / "rates")
    assert set(RATE_KEYS) <= set(scalars)
    runner = _rows(logdir / "runner-0.csv")
    assert runner and set(RUNNER_KEYS) <= set(runner[0])
    assert max(float(row["env_steps_per_s"] or 0) for row in runner) > 0


def test_an_inprocess_run_logs_rates_to_csv_tensorboard_and_its_summary(tmp_path):
    stream = io.StringIO()
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=30",
                            num_runners=2, envs_per_runner=4, max_env_steps=3_000,
                            logdir=str(tmp_path), log_every_s=0.2, checkpoint_every_s=None)
    result = run_inprocess(experiment, stream=stream)
    _check_rates_files(tmp_path)
    assert "rates env_steps_per_s=" in stream.getvalue()
    assert set(result.rates) == set(SUMMARY_RATES)
    assert result.rates["learner_steps_per_s"] > 0 and result.rates["mean_batch_size"] >= 1
    assert "mean batch" in result.summary() and "replay:" in result.summary()
    train = _tb_scalars(tmp_path / "tb" / "train")
    assert "mean_return" in train and "loss" in _tb_scalars(tmp_path / "tb" / "learner")


def test_a_local_mp_run_logs_rates_from_the_learner_and_the_runners(tmp_path):
    experiment = Experiment(builder=VTraceBuilder(SMALL), environment="fake:obs=4,len=30",
                            num_runners=2, envs_per_runner=4, max_env_steps=4_000,
                            logdir=str(tmp_path), log_every_s=0.5, evaluate_every_s=None,
                            checkpoint_every_s=None)
    result = run_local_mp(experiment, stream=io.StringIO())
    _check_rates_files(tmp_path)
    assert "rates env_steps_per_s=" in (tmp_path / "logs" / "learner.log").read_text()
    assert result.rates.get("learner_steps_per_s", 0) > 0
    assert os.path.exists(tmp_path / "runner-1.csv")
