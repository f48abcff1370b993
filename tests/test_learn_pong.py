"""`benchmarks/learn_pong.py`'s reading of a run's logs: the score curve, the frames to each
milestone (on 100-game means only) and the learner's busy fraction."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("learn_pong", ROOT / "benchmarks" /
                                                  "learn_pong.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


def test_the_curve_counts_frames_and_reads_milestones_on_100_game_means(bench, tmp_path):
    _write(tmp_path / "train.csv", "env_steps,episodes,mean_return,steps_per_s",
           ["0,0,nan,0", "1000,40,12.0,800", "2000,100,-5.0,800", "3000,150,10.5,800",
            "4000,210,18.0,800"])
    curve = bench.score_curve(str(tmp_path))
    # Frames are 4 per env step; the row without a mean is left out.
    assert curve == [(4000, 40, 12.0), (8000, 100, -5.0), (12000, 150, 10.5),
                     (16000, 210, 18.0)]
    # The 12.0 over 40 games does not count: a milestone is read on 100 games or more.
    assert bench.frames_to(curve, 10.0) == 12000
    assert bench.frames_to(curve, 0.0) == 12000
    assert bench.frames_to(curve, -5.0) == 8000
    assert bench.frames_to(curve, 18.0) == 16000
    assert bench.frames_to(curve, 19.0) is None


def test_the_learner_is_busy_for_the_time_it_did_not_wait_for_data(bench, tmp_path):
    _write(tmp_path / "rates.csv", "env_steps,replay_sample_wait_frac",
           ["100,0.9", "200,0.1", "300,", "400,0.2"])
    assert bench.learner_busy_fraction(str(tmp_path)) == pytest.approx(0.6)
    _write(tmp_path / "rates.csv", "env_steps,replay_sample_wait_frac", [])
    assert bench.learner_busy_fraction(str(tmp_path)) is None
