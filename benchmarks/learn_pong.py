"""Pong's sample efficiency: the score curve of V-trace over a frame budget.

    python benchmarks/learn_pong.py [--frames 13000000] [--protocol ale_v5|no_sticky_life_loss]
                                    [--preset atari_ppo] [--seed 0] [--minutes 600]
                                    [--game Pong] [--env-options fire=1] [--target 18]
                                    [--logdir DIR [--resume]]

Trains `atari:<game>` (Pong unless `--game` names another) under the named protocol
(`seed_agents.envs.atari.ATARI_PROTOCOLS`) with the named V-trace preset as local
processes (the README's Atari data path: runner processes, central inference, the FIFO
queue), ends the preset's schedules with the frame budget where it has them
(`anneal_over_budget`; `atari_ppo` adapts its learning rate instead), and reads the run's
`train.csv` (the mean return of the last 100 games against env steps) back as the score
curve. Frames are emulator frames: env steps x 4.

Prints the curve (frames, games, mean return) and, last, one JSON line:
`value` is the 100-game mean at the end of the run, `frames_to` the frames when that mean
(over at least 100 games) first reached each of `--milestones` (Pong: 0, 10 and 18; null:
never), `baseline` a uniformly random policy's mean return over `--baseline-games` games of
the same protocol, played in the same run, and `ratio` = (value - baseline) / (target -
baseline): 1 at the target (`--target`, Pong's 18 by default), 0 at random play; the
learner's busy fraction (1 - the time it waited for data) and the frames/s stand beside
it. A run stopped by `--minutes` before its budget says so in `stop_reason` and `frames`.
For a game other than Pong, name a `--target` (an anchor's score at the budget) to get a
ratio.

A run can be split into pieces (a machine lent for minutes at a time, a session's end):
stop it with `--minutes`, then continue it with the same arguments plus `--resume` and a
larger `--minutes` (the wall time of the pieces before counts toward it); the learner,
counters, schedules and score curve carry on from the last checkpoint in `--logdir`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from builders.vtrace import VTraceBuilder  # noqa: E402
from launch.backends.local_mp import run_local_mp  # noqa: E402
from launch.experiment import Experiment  # noqa: E402
from seed_agents.agents.vtrace.config import VTraceConfig  # noqa: E402
from seed_agents.envs.atari import ATARI_PROTOCOLS, protocol_env_id  # noqa: E402
from seed_agents.envs.random_play import random_return  # noqa: E402
from seed_agents.utils.overrides import parse_overrides  # noqa: E402
from seed_agents.utils.reference import machine_report  # noqa: E402

PONG_TARGET = 18.0
PONG_MILESTONES = (0.0, 10.0, 18.0)
ACTION_REPEAT = 4
MIN_GAMES = 100  # the thresholds are read on a 100-game mean, as the anchors' curves are


def score_curve(logdir: str) -> list[tuple[int, int, float]]:
    """(frames, games, mean return of the last 100 games) for each row of `train.csv`
    that has a mean return."""
    curve = []
    with open(os.path.join(logdir, "train.csv"), newline="") as f:
        for row in csv.DictReader(f):
            try:
                mean = float(row["mean_return"])
            except (TypeError, ValueError):
                continue
            if np.isfinite(mean):
                curve.append((int(float(row["env_steps"])) * ACTION_REPEAT,
                              int(float(row["episodes"])), mean))
    return curve


def frames_to(curve: list[tuple[int, int, float]], score: float) -> int | None:
    return next((frames for frames, games, mean in curve
                 if games >= MIN_GAMES and mean >= score), None)


def learner_busy_fraction(logdir: str) -> float | None:
    """1 - the mean fraction of time the learner waited for data (`rates.csv`), or None."""
    waits = []
    with open(os.path.join(logdir, "rates.csv"), newline="") as f:
        for row in csv.DictReader(f):
            try:
                waits.append(float(row["replay_sample_wait_frac"]))
            except (TypeError, ValueError):
                continue
    waits = [w for w in waits if np.isfinite(w)]
    return round(1.0 - float(np.mean(waits)), 3) if waits else None


def measure_game(*, game: str, protocol: str, frames: int, seed: int, minutes: float,
                 logdir: str, resume: bool, preset: str = "atari_ppo",
                 overrides: list[str] | tuple[str, ...] = (), env_options: str = "",
                 target: float | None = None, milestones: tuple[float, ...] = (),
                 runners: int = 2, envs_per_runner: int = 32,
                 baseline_games: int = 3) -> dict:
    """Trains `game` under `protocol` to `frames` (or `minutes` of the run's wall time, all
    pieces counted) in `logdir`, and returns the benchmark's JSON record of it.

    `learn_atari5.py` calls this for each of its games; `main` for one.
    """
    from seed_agents.agents.vtrace import presets

    config = parse_overrides(VTraceConfig, [*presets.VTRACE_PRESETS[preset], *overrides]
                             ).for_budget(frames // ACTION_REPEAT)
    pong = game.lower() == "pong"
    env_id = protocol_env_id(game, protocol)
    if env_options.strip(","):
        env_id = f"{env_id},{env_options.strip(',')}"
    bench = "learn_pong" if pong else f"learn_atari_{game.lower()}"
    baseline = random_return(env_id, baseline_games, 10_000 + seed)
    result = run_local_mp(Experiment(
        builder=VTraceBuilder(config), environment=env_id, num_runners=runners,
        envs_per_runner=envs_per_runner, max_env_steps=frames // ACTION_REPEAT,
        max_wall_s=minutes * 60.0, seed=seed, logdir=logdir, log_every_s=10.0,
        inference_max_wait_ms=20.0, evaluate_every_s=None, checkpoint_every_s=300.0,
        resume=resume),
        stream=sys.stderr)
    curve = score_curve(logdir)
    for at, games, mean in curve[:: max(1, len(curve) // 40)]:
        print(f"frames {at:>11,}  games {games:>6,}  mean return {mean:6.2f}")
    # No game ended yet (a short piece of a long game): no score, the rest still holds.
    value = result.mean_return if np.isfinite(result.mean_return) else None
    ratio = (None if target is None or value is None
             else round((value - baseline) / (target - baseline), 3))
    health = feature_health_summary(logdir)
    return {
        "bench": bench,
        "value": None if value is None else round(value, 2),
        "unit": "return",
        "game": game,
        "frames": result.env_steps * ACTION_REPEAT,
        "frame_budget": frames,
        "at_budget": result.env_steps * ACTION_REPEAT >= frames,
        "games": result.episodes,
        "frames_to": {f"{m:g}": frames_to(curve, m) for m in milestones},
        "frames_per_s": round(result.env_steps * ACTION_REPEAT / result.wall_s, 1),
        "wall_s": round(result.wall_s, 1),
        "learner_busy_frac": learner_busy_fraction(logdir),
        **health,
        "stop_reason": result.stop_reason,
        "protocol": protocol,
        "env": env_id,
        "preset": preset,
        "overrides": list(overrides),
        "seed": seed,
        "logdir": logdir,
        "baseline": round(baseline, 2),
        "baseline_kind": f"random policy, {baseline_games} games",
        "target": target,
        "ratio": ratio,
        "ratio_kind": "(value - random) / (target - random): 1 meets the target",
        "machine": machine_report(config.precision),
    }


def feature_health_summary(logdir: str) -> dict:
    """The learner's last `live_features` and `value_std` (`learner.csv`), and the lowest
    `live_features` of the run: a run whose network stopped looking at the screen says so
    in its JSON line."""
    path = os.path.join(logdir, "learner.csv")
    live, value_std = [], []
    if os.path.exists(path):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for key, into in (("live_features", live), ("value_std", value_std)):
                    try:
                        into.append(float(row[key]))
                    except (KeyError, TypeError, ValueError):
                        pass
    return {
        "live_features_last": round(live[-1], 3) if live else None,
        "live_features_min": round(min(live), 3) if live else None,
        "value_std_last": float(f"{value_std[-1]:.3g}") if value_std else None,
    }


def parse_milestones(text: str | None, game: str, target: float | None) -> tuple[float, ...]:
    """`--milestones` as numbers; by default Pong's 0, 10, 18 or another game's target.

    Raises:
      ValueError: For a part that is not a number.
    """
    if text is not None:
        try:
            return tuple(float(m) for m in text.split(",") if m.strip())
        except ValueError:
            raise ValueError(f"--milestones takes comma-separated numbers, got {text!r}") from None
    if game.lower() == "pong":
        return PONG_MILESTONES
    return (target,) if target is not None else ()


def main() -> None:
    from seed_agents.agents.vtrace import presets

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=13_000_000, help="emulator frames")
    parser.add_argument("--protocol", choices=sorted(ATARI_PROTOCOLS), default="ale_v5")
    parser.add_argument("--game", default="Pong", help="an ALE game, e.g. Breakout")
    parser.add_argument("--env-options", default="",
                        help="more atari: options after the protocol's, e.g. fire=1")
    parser.add_argument("--target", type=float, default=None,
                        help="the score the ratio is measured against (Pong: 18)")
    parser.add_argument("--milestones", default=None,
                        help="comma-separated scores to report the frames to "
                             "(Pong: 0,10,18; others: the target)")
    parser.add_argument("--preset", default="atari_ppo", choices=sorted(presets.VTRACE_PRESETS))
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="V-trace config overrides after the preset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--baseline-games", type=int, default=3)
    parser.add_argument("--logdir", default=None, help="default: runs/learn_pong-<time>")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --logdir (same arguments, more --minutes)")
    args = parser.parse_args()
    if args.resume and not args.logdir:
        parser.error("--resume continues the run in --logdir: name it.")
    pong = args.game.lower() == "pong"
    target = args.target if args.target is not None else (PONG_TARGET if pong else None)
    try:
        milestones = parse_milestones(args.milestones, args.game, target)
    except ValueError as error:
        parser.error(str(error))
    bench = "learn_pong" if pong else f"learn_atari_{args.game.lower()}"
    logdir = args.logdir or time.strftime(f"runs/{bench}-%Y%m%d-%H%M%S")
    record = measure_game(
        game=args.game, protocol=args.protocol, frames=args.frames, seed=args.seed,
        minutes=args.minutes, logdir=logdir, resume=args.resume, preset=args.preset,
        overrides=args.overrides, env_options=args.env_options, target=target,
        milestones=milestones, runners=args.runners, envs_per_runner=args.envs_per_runner,
        baseline_games=args.baseline_games)
    if record["value"] is None:
        raise SystemExit(f"No game of {args.game} ended within the run ({record['frames']:,} "
                         "frames): give it more frames or minutes.")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
