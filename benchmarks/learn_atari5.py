"""The Atari-5 estimate: V-trace on BattleZone, DoubleDunk, NameThisGame, Phoenix and Qbert.

    python benchmarks/learn_atari5.py --parent runs/atari5 --seed 1 [--frames 10000000]
                                      [--minutes 170] [--games BattleZone,Qbert]
                                      [--preset atari_ppo_large] [--set KEY=VALUE ...]
                                      [--protocol ale_v5] [--report]

Trains each of the five games (`seed_agents.envs.atari_scores.ATARI5_GAMES`) in turn with one
V-trace preset, unchanged across them, under the published protocol (`ale_v5`: sticky
actions 0.25, the minimal action set, no life-loss signal, 108K-frame episodes), to the
frame budget, each in its own logdir `PARENT/<game>/seed-<S>` (one run each, as
`learn_pong.py` makes it: runner processes, central inference, the FIFO queue).

In pieces: `--minutes` is this invocation's wall time for all its games together. A game
that reaches its budget leaves `result.json` in its logdir and is skipped from then on; an
unfinished one is resumed from its last checkpoint. So the same command, run again (a new
session, a lent machine's next ten minutes), carries on where the last piece stopped, and
`--report` trains nothing and prints what the pieces left.

Prints each game's JSON line as `learn_pong.py` does (its 100-game mean at the budget, the
random policy's, frames/s, the learner's feature health; `target` and `ratio` against
Rainbow's score at 10M frames, `frames_to` when the 100-game mean reached it), each game's
human-normalized
score (HNS = 100 (score - random) / (human - random)), and, last, one JSON line: `value` is
the Atari-5 estimate of the median HNS over 57 games,
10 ** (sum_i w_i log10(1 + max(HNS_i, 0))) - 1, in %, once all five games are at their
budget (null before, with `complete: false`), with the settings the games ran under
(`settings`, `one_preset`: false where they differ); `baseline` is the random policy's estimate
(0 by construction) and `ratio` the estimate over IQN's 68.2% at 10M frames (the best
published at that budget; Rainbow's is 43.1%, both from Dopamine's per-game data).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from learn_pong import measure_game  # noqa: E402

from seed_agents.envs.atari import ATARI_PROTOCOLS  # noqa: E402
from seed_agents.envs.atari_scores import (  # noqa: E402
    ATARI5_ANCHORS_10M,
    ATARI5_GAMES,
    ATARI5_WEIGHTS,
    REFERENCE_SCORES,
    atari5_estimate,
    human_normalized,
)

RESULT_FILE = "result.json"
MIN_PIECE_MINUTES = 2.0  # less than this is spent starting processes, not learning


def game_logdir(parent: str, game: str, seed: int) -> str:
    return os.path.join(parent, game, f"seed-{seed}")


def read_result(logdir: str) -> dict | None:
    """The JSON record a finished game left in its logdir, or None."""
    path = os.path.join(logdir, RESULT_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def prior_wall_s(logdir: str) -> float:
    """The run's wall time so far, all pieces (the last `wall_s` of its `train.csv`); 0 for a
    run not started. An upper bound of what a resume restores (the checkpoint may be a few
    minutes older), so a piece never runs past its share."""
    import csv

    path = os.path.join(logdir, "train.csv")
    if not os.path.exists(path):
        return 0.0
    wall = 0.0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                wall = max(wall, float(row["wall_s"]))
            except (KeyError, TypeError, ValueError):
                continue
    return wall


def _effective_config(preset: str | None, overrides: list[str]) -> str | None:
    """The V-trace config `preset` and `overrides` build, as sorted JSON; None where the
    preset is unknown (a record from another version) or the overrides do not build."""
    import dataclasses

    from seed_agents.agents.vtrace.config import VTraceConfig
    from seed_agents.agents.vtrace.presets import VTRACE_PRESETS
    from seed_agents.utils.overrides import parse_overrides

    if preset not in VTRACE_PRESETS:
        return None
    try:
        config = parse_overrides(VTraceConfig, [*VTRACE_PRESETS[preset], *overrides])
    except ValueError:
        return None
    return json.dumps(dataclasses.asdict(config), sort_keys=True, default=str)


def estimate_record(results: dict[str, dict], frame_budget: int, protocol: str,
                    seed: int) -> dict:
    """The last JSON line: the Atari-5 estimate from the games at their budget."""
    done = {game: r for game, r in results.items()
            if r.get("at_budget") and r.get("value") is not None}
    complete = all(game in done for game in ATARI5_GAMES)
    scores = {game: float(r["value"]) for game, r in done.items()}
    value = round(atari5_estimate(scores), 2) if complete else None
    # The estimate stands for one preset only if every game ran the same config: a parent
    # whose games ran under different settings says so rather than mixing them. Configs are
    # compared, not names, so `--preset atari_ppo --set ...` equal to a named preset counts
    # as that preset.
    settings = sorted({json.dumps([r.get("preset"), list(r.get("overrides") or [])])
                       for r in done.values()})
    configs = {_effective_config(r.get("preset"), r.get("overrides") or [])
               for r in done.values()}
    anchors = {name: round(atari5_estimate(per_game), 1)
               for name, per_game in ATARI5_ANCHORS_10M.items()}
    return {
        "bench": "learn_atari5",
        "value": value,
        "unit": "% median human-normalized score (Atari-5 estimate)",
        "complete": complete,
        "games": {game: {"score": results.get(game, {}).get("value"),
                         "hns": (None if results.get(game, {}).get("value") is None else
                                 round(human_normalized(game, results[game]["value"]), 2)),
                         "at_budget": game in done,
                         "frames": results.get(game, {}).get("frames"),
                         "weight": ATARI5_WEIGHTS[game],
                         "random": REFERENCE_SCORES[game].random,
                         "human": REFERENCE_SCORES[game].human,
                         "rainbow_10m": ATARI5_ANCHORS_10M["Rainbow"][game],
                         "iqn_10m": ATARI5_ANCHORS_10M["IQN"][game]}
                  for game in ATARI5_GAMES},
        "frame_budget": frame_budget,
        "protocol": protocol,
        "seed": seed,
        "settings": [json.loads(each) for each in settings],
        "one_preset": len(configs) <= 1 and None not in configs,
        "anchors_10m": anchors,
        "baseline": 0.0,
        "baseline_kind": "a uniformly random policy (HNS 0 on every game)",
        "ratio": None if value is None else round(value / anchors["IQN"], 3),
        "ratio_kind": "estimate / IQN's estimate at 10M frames (Dopamine, 5 seeds)",
    }


def main() -> None:
    try:
        run(sys.argv[1:])
    except KeyboardInterrupt:
        # The game's run stopped its processes (local_mp re-raises once they are down).
        print("learn_atari5: interrupted; every process was stopped. The same command "
              "continues each unfinished game from its newest checkpoint.", file=sys.stderr)
        raise SystemExit(130) from None


def run(argv: list[str]) -> None:
    """Parses `argv`, trains this piece's games and prints every game's and the estimate's
    JSON line."""
    from seed_agents.agents.vtrace import presets

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", required=True, help="logdir of the five runs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--frames", type=int, default=10_000_000, help="emulator frames a game")
    parser.add_argument("--minutes", type=float, default=600.0,
                        help="this piece's wall time for all its games")
    parser.add_argument("--games", default=",".join(ATARI5_GAMES),
                        help="which of the five to train in this piece (all are reported)")
    parser.add_argument("--protocol", choices=sorted(ATARI_PROTOCOLS), default="ale_v5")
    parser.add_argument("--preset", default="atari_ppo_large",
                        choices=sorted(presets.VTRACE_PRESETS))
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="V-trace config overrides after the preset")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: print what the pieces so far left")
    args = parser.parse_args(argv)
    games = [g.strip() for g in args.games.split(",") if g.strip()]
    unknown = [g for g in games if g not in ATARI5_GAMES]
    if unknown:
        parser.error(f"--games takes games of {list(ATARI5_GAMES)}, got {unknown}.")

    deadline = time.monotonic() + args.minutes * 60.0
    results: dict[str, dict] = {}
    for game in ATARI5_GAMES:
        logdir = game_logdir(args.parent, game, args.seed)
        result = read_result(logdir)
        left_min = (deadline - time.monotonic()) / 60.0
        if (result is None and not args.report and game in games
                and left_min >= MIN_PIECE_MINUTES):
            started = os.path.exists(os.path.join(logdir, "run.json"))
            minutes = prior_wall_s(logdir) / 60.0 + left_min
            rainbow = ATARI5_ANCHORS_10M["Rainbow"][game]
            record = measure_game(
                game=game, protocol=args.protocol, frames=args.frames, seed=args.seed,
                minutes=minutes, logdir=logdir, resume=started, preset=args.preset,
                overrides=args.overrides, target=rainbow, milestones=(rainbow,))
            if record["at_budget"] and record["value"] is not None:
                with open(os.path.join(logdir, RESULT_FILE), "w") as f:
                    json.dump(record, f, indent=1)
            result = record
        if result is not None:
            results[game] = result
            hns = (None if result["value"] is None
                   else round(human_normalized(game, result["value"]), 2))
            print(json.dumps({**result, "hns": hns}))
        else:
            print(f"{game}: not at its budget yet ({logdir})", file=sys.stderr)
    print(json.dumps(estimate_record(results, args.frames, args.protocol, args.seed)))


if __name__ == "__main__":
    main()
