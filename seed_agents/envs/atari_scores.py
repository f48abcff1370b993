"""Reference scores for Atari: human-normalized scores and the Atari-5 estimate.

A table of Atari results is read against two references per game, a uniformly random
policy and a human tester: the human-normalized score (HNS) puts the random policy at 0%
and the human at 100%. Atari-5 (Aitchison, Sweetser and Hutter, 2022, "Atari-5: Distilling
the Arcade Learning Environment down to Five Games") predicts the median HNS over all 57
games from five of them, with a regression in log space:

    estimate = 10 ** (sum_i w_i * log10(1 + max(HNS_i, 0))) - 1          (in %)

The weights are the authors' (maitchison/PPO `tools/plot_util.py`, no intercept); random
and human scores are theirs too (maitchison/Atari-5 `Atari-Human.csv`). Fed Dopamine's
per-game scores at 10M frames (sticky actions, 5 seeds) the formula gives DQN 9.6%,
Rainbow 43.1% and IQN 68.2% (`ATARI5_ANCHORS_10M`; the tests check the last two).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GameReference:
    """A game's random and human scores (the 0% and 100% of its HNS)."""

    random: float
    human: float


REFERENCE_SCORES: dict[str, GameReference] = {
    "BattleZone": GameReference(2360.0, 37187.5),
    "DoubleDunk": GameReference(-18.55, -16.4),
    "NameThisGame": GameReference(2292.35, 8049.0),
    "Phoenix": GameReference(761.4, 7242.6),
    "Qbert": GameReference(163.88, 13455.0),
    "Pong": GameReference(-20.7, 14.6),
    "Breakout": GameReference(1.7, 30.5),
}
"""Random and human scores by ALE game name (Atari-5's `Atari-Human.csv`; Pong and
Breakout are the usual DQN-paper figures, for the games this project tunes on)."""

ATARI5_WEIGHTS: dict[str, float] = {
    "BattleZone": 0.3819751237831753,
    "DoubleDunk": 0.0679099488887574,
    "NameThisGame": 0.310804148620847,
    "Phoenix": 0.12412619402774641,
    "Qbert": 0.08048518286466755,
}
"""The five games of Atari-5 and their regression weights (no intercept)."""

ATARI5_GAMES: tuple[str, ...] = tuple(ATARI5_WEIGHTS)

ATARI5_ANCHORS_10M: dict[str, dict[str, float]] = {
    "Rainbow": {"BattleZone": 20209.0, "DoubleDunk": -18.9, "NameThisGame": 8604.0,
                "Phoenix": 4830.0, "Qbert": 5354.0},
    "IQN": {"BattleZone": 24152.0, "DoubleDunk": -12.9, "NameThisGame": 8644.0,
            "Phoenix": 4753.0, "Qbert": 5207.0},
}
"""Per-game scores at 10M frames, sticky actions 0.25 (Dopamine's published per-game
baselines, mean of 5 seeds): what the Atari-5 table is read against."""


def human_normalized(game: str, score: float) -> float:
    """The HNS of `score` in %: 100 (score - random) / (human - random).

    Raises:
      KeyError: For a game without reference scores, naming the games that have them.
    """
    if game not in REFERENCE_SCORES:
        raise KeyError(f"No random/human reference scores for {game!r}; known: "
                       f"{sorted(REFERENCE_SCORES)}.")
    ref = REFERENCE_SCORES[game]
    return 100.0 * (score - ref.random) / (ref.human - ref.random)


def atari5_estimate(scores: Mapping[str, float]) -> float:
    """The Atari-5 estimate (in %) of the median HNS over 57 games, from raw game scores.

    `scores` maps each of the five games to its score; a negative HNS counts as 0, as in
    the authors' code.

    Raises:
      ValueError: When a game of the five is missing or a score is not finite.
    """
    missing = [game for game in ATARI5_GAMES if game not in scores]
    if missing:
        raise ValueError(f"The Atari-5 estimate needs all five games; missing {missing}.")
    total = 0.0
    for game, weight in ATARI5_WEIGHTS.items():
        score = float(scores[game])
        if not math.isfinite(score):
            raise ValueError(f"{game}'s score is {score}: the estimate needs finite scores.")
        total += weight * math.log10(1.0 + max(human_normalized(game, score), 0.0))
    return 10.0 ** total - 1.0
