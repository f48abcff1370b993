"""Feature health: which features still depend on the input, and the watch that warns
when none do (`seed_agents.networks.health`, the learner logger that feeds it)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
import tensorflow as tf

from launch.nodes import make_learner_logger
from seed_agents.networks.health import (
    FEATURE_STD,
    LIVE_FEATURES,
    CollapseWatch,
    feature_health,
)


def test_live_features_counts_the_units_that_vary_over_the_kept_rows():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(6, 4)).astype(np.float32)
    rows[:, 1] = 0.0  # a dead ReLU: exactly 0 everywhere
    rows[:, 2] = 0.7  # behind a dead layer: exactly its bias
    rows[5, 3] = 9.0  # unit 3 varies only through the last row...
    rows[:5, 3] = 1.0
    health = feature_health(tf.constant(rows))
    assert float(health[LIVE_FEATURES]) == pytest.approx(2 / 4)
    # ...which the mask leaves out (a padding row after an episode's end).
    mask = tf.constant([1, 1, 1, 1, 1, 0], tf.float32)
    health = feature_health(tf.constant(rows), mask)
    assert float(health[LIVE_FEATURES]) == pytest.approx(1 / 4)
    expected_std = np.mean(np.std(rows[:5], axis=0))
    assert float(health[FEATURE_STD]) == pytest.approx(expected_std, rel=1e-5)


def test_time_major_features_and_a_single_row():
    features = tf.reshape(tf.range(24, dtype=tf.float32), [2, 3, 4])  # [T, B, F]
    assert float(feature_health(features)[LIVE_FEATURES]) == 1.0
    one_row = feature_health(features, tf.constant([[1, 0, 0], [0, 0, 0]], tf.float32))
    assert float(one_row[LIVE_FEATURES]) == 0.0  # one row cannot show a dependence
    assert float(one_row[FEATURE_STD]) == 0.0


def _rows(live: list[float]) -> list[dict]:
    return [{"learner_steps": i + 1, LIVE_FEATURES: value, "value_std": 0.0}
            for i, value in enumerate(live)]


def test_the_watch_warns_once_after_patience_rows_and_again_after_a_recovery():
    watch = CollapseWatch(threshold=0.02, patience=3)
    said = [watch.observe(row) for row in _rows([0.5, 0.01, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0])]
    # Two low rows, then a recovery: no warning; three low rows in a row: one.
    assert [i for i, warning in enumerate(said) if warning] == [6]
    assert "learner step 7" in said[6] and "live_features <= 0.02 for 3" in said[6]
    assert "max_learning_rate" in said[6]
    assert watch.latest == 0.0
    # Recovered, then collapsed again: warned again.
    later = [watch.observe(row) for row in _rows([0.4, 0.0, 0.0, 0.0])]
    assert [bool(w) for w in later] == [False, False, False, True]


def test_the_watch_ignores_rows_without_feature_health_and_checks_its_settings():
    watch = CollapseWatch(patience=1)
    assert watch.observe({"learner_steps": 1, "loss": 0.3}) is None
    assert watch.latest is None
    with pytest.raises(ValueError, match="patience"):
        CollapseWatch(patience=0)
    with pytest.raises(ValueError, match="threshold"):
        CollapseWatch(threshold=1.0)


@pytest.mark.parametrize("with_logdir", [True, False])
def test_the_learner_logger_writes_its_rows_and_prints_the_watchs_warning(tmp_path,
                                                                          with_logdir):
    stream = io.StringIO()
    logdir = str(tmp_path) if with_logdir else None
    logger = make_learner_logger(logdir, append=False, watch=CollapseWatch(patience=2),
                                 stream=stream)
    for row in _rows([0.3, 0.0, 0.0]):
        logger.write(row)
    logger.close()
    assert stream.getvalue().count("WARNING") == 1
    assert "stopped depending on the observation at learner step 3" in stream.getvalue()
    if with_logdir:
        with open(tmp_path / "learner.csv") as f:
            logged = [float(row[LIVE_FEATURES]) for row in csv.DictReader(f)]
        assert logged == [0.3, 0.0, 0.0]
