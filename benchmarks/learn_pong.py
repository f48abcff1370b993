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


def main() -> None:
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
    parser.add_argument("--preset", default="atari_ppo", choices=["atari_ppo", "atari_cpu"])
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

    from seed_agents.agents.vtrace import presets

    preset = {"atari_ppo": presets.ATARI_PPO, "atari_cpu": presets.ATARI_CPU}[args.preset]
    config = parse_overrides(VTraceConfig, [*preset, *args.overrides]).for_budget(
        args.frames // ACTION_REPEAT)
    if args.resume and not args.logdir:
        parser.error("--resume continues the run in --logdir: name it.")
    pong = args.game.lower() == "pong"
    target = args.target if args.target is not None else (PONG_TARGET if pong else None)
    if args.milestones is not None:
        try:
            milestones = tuple(float(m) for m in args.milestones.split(",") if m.strip())
        except ValueError:
            parser.error(f"--milestones takes comma-separated numbers, got {args.milestones!r}")
    else:
        milestones = PONG_MILESTONES if pong else ((target,) if target is not None else ())
    env_id = protocol_env_id(args.game, args.protocol)
    if args.env_options.strip(","):
        env_id = f"{env_id},{args.env_options.strip(',')}"
    bench = "learn_pong" if pong else f"learn_atari_{args.game.lower()}"
    logdir = args.logdir or time.strftime(f"runs/{bench}-%Y%m%d-%H%M%S")

    baseline = random_return(env_id, args.baseline_games, 10_000 + args.seed)
    result = run_local_mp(Experiment(
        builder=VTraceBuilder(config), environment=env_id, num_runners=args.runners,
        envs_per_runner=args.envs_per_runner, max_env_steps=args.frames // ACTION_REPEAT,
        max_wall_s=args.minutes * 60.0, seed=args.seed, logdir=logdir, log_every_s=10.0,
        inference_max_wait_ms=20.0, evaluate_every_s=None, checkpoint_every_s=300.0,
        resume=args.resume),
        stream=sys.stderr)
    curve = score_curve(logdir)
    for frames, games, mean in curve[:: max(1, len(curve) // 40)]:
        print(f"frames {frames:>11,}  games {games:>6,}  mean return {mean:6.2f}")
    if not np.isfinite(result.mean_return):
        raise SystemExit(f"No game of {args.game} ended within the run ({result.env_steps:,} env "
                         "steps): give it more frames or minutes.")
    value = result.mean_return
    ratio = None if target is None else round((value - baseline) / (target - baseline), 3)
    print(json.dumps({
        "bench": bench,
        "value": round(value, 2),
        "unit": "return",
        "frames": result.env_steps * ACTION_REPEAT,
        "frame_budget": args.frames,
        "games": result.episodes,
        "frames_to": {f"{m:g}": frames_to(curve, m) for m in milestones},
        "frames_per_s": round(result.env_steps * ACTION_REPEAT / result.wall_s, 1),
        "learner_busy_frac": learner_busy_fraction(logdir),
        "stop_reason": result.stop_reason,
        "protocol": args.protocol,
        "env": env_id,
        "preset": args.preset,
        "overrides": args.overrides,
        "seed": args.seed,
        "logdir": logdir,
        "baseline": round(baseline, 2),
        "baseline_kind": f"random policy, {args.baseline_games} games",
        "target": target,
        "ratio": ratio,
        "ratio_kind": "(value - random) / (target - random): 1 meets the target",
        "machine": machine_report(config.precision),
    }))


if __name__ == "__main__":
    main()
