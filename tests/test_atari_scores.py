"""Human-normalized scores and the Atari-5 estimate, checked against the published anchors,
and `benchmarks/learn_atari5.py`'s last JSON line built from its games' records."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from seed_agents.envs.atari_scores import (
    ATARI5_ANCHORS_10M,
    ATARI5_GAMES,
    ATARI5_WEIGHTS,
    atari5_estimate,
    human_normalized,
)

ROOT = Path(__file__).resolve().parents[1]


def test_human_normalized_puts_random_at_0_and_human_at_100():
    assert human_normalized("BattleZone", 2360.0) == pytest.approx(0.0)
    assert human_normalized("BattleZone", 37187.5) == pytest.approx(100.0)
    assert human_normalized("DoubleDunk", -16.4) == pytest.approx(100.0)
    # Below random is negative: the estimate, not the HNS, floors it.
    assert human_normalized("Qbert", 0.0) < 0.0
    with pytest.raises(KeyError, match="NoSuchGame.*BattleZone"):
        human_normalized("NoSuchGame", 1.0)


def test_the_estimate_gives_dopamines_anchors_at_10m_frames():
    # The issue's figures, computed from Dopamine's per-game data with the authors' formula.
    assert atari5_estimate(ATARI5_ANCHORS_10M["Rainbow"]) == pytest.approx(43.1, abs=0.05)
    assert atari5_estimate(ATARI5_ANCHORS_10M["IQN"]) == pytest.approx(68.2, abs=0.05)
    assert sum(ATARI5_WEIGHTS.values()) == pytest.approx(0.966, abs=1e-3)


def test_the_estimate_floors_negative_scores_and_is_the_human_at_100_percent():
    random = {"BattleZone": 2360.0, "DoubleDunk": -18.55, "NameThisGame": 2292.35,
              "Phoenix": 761.4, "Qbert": 163.88}
    assert atari5_estimate(random) == pytest.approx(0.0, abs=1e-12)
    worse = {game: score - 1000.0 for game, score in random.items()}
    assert atari5_estimate(worse) == pytest.approx(0.0, abs=1e-12)
    # Every game at 100% HNS: 101 ** (sum of weights) - 1, just under 100% (no intercept).
    human = {"BattleZone": 37187.5, "DoubleDunk": -16.4, "NameThisGame": 8049.0,
             "Phoenix": 7242.6, "Qbert": 13455.0}
    assert atari5_estimate(human) == pytest.approx(101 ** sum(ATARI5_WEIGHTS.values()) - 1)


def test_the_estimate_refuses_a_missing_game_or_a_non_finite_score():
    scores = dict(ATARI5_ANCHORS_10M["Rainbow"])
    del scores["Phoenix"]
    with pytest.raises(ValueError, match="Phoenix"):
        atari5_estimate(scores)
    with pytest.raises(ValueError, match="Qbert.*nan"):
        atari5_estimate({**ATARI5_ANCHORS_10M["Rainbow"], "Qbert": math.nan})


@pytest.fixture(scope="module")
def bench(monkeypatch_module):
    monkeypatch_module.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("learn_atari5",
                                                  ROOT / "benchmarks" / "learn_atari5.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()
    sys.modules.pop("learn_pong", None)


def test_the_benchmark_estimates_only_when_all_five_games_are_at_their_budget(bench, tmp_path):
    results = {game: {"value": score, "frames": 10_000_000, "at_budget": True}
               for game, score in ATARI5_ANCHORS_10M["IQN"].items()}
    record = bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)
    assert record["complete"] is True
    assert record["value"] == pytest.approx(68.24, abs=0.01)
    assert record["ratio"] == pytest.approx(1.0, abs=0.002)
    assert record["anchors_10m"] == {"Rainbow": 43.1, "IQN": 68.2}
    assert record["games"]["Qbert"]["hns"] == pytest.approx(
        human_normalized("Qbert", 5207.0), abs=0.01)
    json.dumps(record)  # one JSON line
    # A game stopped short of its budget (a piece ran out) is not counted yet.
    results["Qbert"] = {**results["Qbert"], "frames": 4_000_000, "at_budget": False}
    partial = bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)
    assert partial["complete"] is False and partial["value"] is None
    assert partial["ratio"] is None
    # The unfinished game's score so far is shown, marked as not at its budget.
    assert partial["games"]["Qbert"]["score"] == 5207.0
    assert partial["games"]["Qbert"]["at_budget"] is False
    assert partial["games"]["BattleZone"]["at_budget"] is True
    assert set(partial["games"]) == set(ATARI5_GAMES)


def test_the_estimate_says_whether_the_five_ran_one_preset(bench):
    one = {"preset": "atari_ppo_large", "overrides": []}
    results = {game: {"value": score, "frames": 10_000_000, "at_budget": True, **one}
               for game, score in ATARI5_ANCHORS_10M["IQN"].items()}
    record = bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)
    assert record["one_preset"] is True
    assert record["settings"] == [["atari_ppo_large", []]]
    # One game run with an override: the estimate is still printed, marked as mixed.
    results["BattleZone"] = {**results["BattleZone"], "overrides": ["batch_size=32"]}
    mixed = bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)
    assert mixed["one_preset"] is False and mixed["value"] is not None
    assert ["atari_ppo_large", ["batch_size=32"]] in mixed["settings"]
    # The same config under another name is the same preset.
    results["BattleZone"] = {**results["BattleZone"], "preset": "atari_ppo", "overrides": [
        "batch_size=240", "queue_size=480", "num_minibatches=8"]}
    renamed = bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)
    assert renamed["one_preset"] is True and len(renamed["settings"]) == 2
    # A record that names no known preset cannot show it ran the same one.
    results["Qbert"] = {**results["Qbert"], "preset": None}
    assert bench.estimate_record(results, 10_000_000, "ale_v5", seed=1)["one_preset"] is False


def test_a_finished_game_is_read_back_and_the_prior_wall_time_counted(bench, tmp_path):
    logdir = bench.game_logdir(str(tmp_path), "Qbert", 2)
    assert logdir.endswith("Qbert/seed-2")
    assert bench.read_result(logdir) is None
    assert bench.prior_wall_s(logdir) == 0.0
    Path(logdir).mkdir(parents=True)
    (Path(logdir) / "train.csv").write_text(
        "env_steps,episodes,mean_return,wall_s\n0,0,nan,0.1\n100,1,5.0,610.5\n200,2,6.0,\n")
    assert bench.prior_wall_s(logdir) == pytest.approx(610.5)
    (Path(logdir) / bench.RESULT_FILE).write_text(json.dumps({"value": 3.0}))
    assert bench.read_result(logdir) == {"value": 3.0}
