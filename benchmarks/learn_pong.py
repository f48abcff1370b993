"""Pong's sample efficiency: the score curve of V-trace (or R2D2) over a frame budget.

    python benchmarks/learn_pong.py [--frames 13000000] [--protocol ale_v5|no_sticky_life_loss]
                                    [--agent vtrace|r2d2] [--preset atari_ppo|atari]
                                    [--seed 0] [--minutes 600]
                                    [--game Pong] [--env-options fire=1] [--target 18]
                                    [--logdir DIR [--resume]]

Trains `atari:<game>` (Pong unless `--game` names another) under the named protocol
(`seed_agents.envs.atari.ATARI_PROTOCOLS`) with the named preset of the agent as local
processes (the SEED data path, docs/architecture.md: runner processes, central
inference, and V-trace's FIFO queue or R2D2's prioritized sequences), ends V-trace's
schedules with the frame budget where it has them (`anneal_over_budget`; `atari_ppo`
adapts its learning rate instead), and reads the run's `train.csv` (the mean return of
the last 100 games against env steps) back as the score curve. Frames are emulator
frames: env steps x 4.

R2D2's score is its evaluation environments' (`num_eval_envs`, acting with
`eval_epsilon`: the `atari` preset's 8 environments at Dopamine's epsilon 0.01), whose
steps are not counted as frames; its JSON adds the replay ratio (`samples_per_insert`,
and the trained rows per env step it makes, against DQN's 8) and the training
environments' 100-game mean, which Ape-X's exploration holds lower.

Prints the curve (frames, games, mean return) and, last, one JSON line:
`value` is the 100-game mean at the end of the run, `frames_to` the frames when that mean
(over at least 100 games) first reached each of `--milestones` (Pong: 0, 10 and 18; null:
never), `baseline` a uniformly random policy's mean return over `--baseline-games` games of
the same protocol, played in the same run, and `ratio` = (value - baseline) / (target -
baseline): 1 at the target (`--target`, Pong's 18 by default), 0 at random play; the
learner's busy fraction (1 - the time it waited for data) and the frames/s stand beside
it, with what the frames cost: `core_s_per_1m_frames` (CPU of every process of the run,
all pieces so far) and `usd_per_1m_frames` at `--usd-per-vcpu-hour`. A run stopped by
`--minutes` before its budget says so in `stop_reason` and `frames`. The learner's last
`live_features` and `value_std` and the policy's last `entropy` (`*_last`) say whether the
network still looks at the screen and how far the policy is from uniform.
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
import math
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
from seed_agents.utils.cost import (  # noqa: E402
    PRICE_SOURCE,
    USD_PER_VCPU_HOUR,
    process_tree_cpu_s,
    usd,
)
from seed_agents.utils.logdir_lock import LogdirInUseError  # noqa: E402
from seed_agents.utils.overrides import parse_overrides  # noqa: E402
from seed_agents.utils.reference import machine_report  # noqa: E402

PONG_TARGET = 18.0
PONG_MILESTONES = (0.0, 10.0, 18.0)
ACTION_REPEAT = 4
MIN_GAMES = 100  # the thresholds are read on a 100-game mean, as the anchors' curves are


AGENTS = ("vtrace", "r2d2")
DEFAULT_PRESETS = {"vtrace": "atari_ppo", "r2d2": "atari"}
DQN_ROWS_PER_ENV_STEP = 8  # DQN's and Rainbow's replay ratio: 32 transitions every 4 steps


def agent_presets(agent: str) -> dict[str, tuple[str, ...]]:
    """The named presets of `agent` ("vtrace" or "r2d2")."""
    if agent == "vtrace":
        from seed_agents.agents.vtrace import presets

        return presets.VTRACE_PRESETS
    from seed_agents.agents.r2d2 import presets

    return presets.R2D2_PRESETS


def make_builder(agent: str, preset: str, overrides: list[str] | tuple[str, ...],
                 env_steps: int):
    """The agent's builder with `preset`, then `overrides`; V-trace's schedules end with the
    budget (`VTraceConfig.for_budget`).

    Raises:
      ValueError: For an unknown agent or preset, or a bad override.
    """
    if agent not in AGENTS:
        raise ValueError(f"agent must be one of {AGENTS}, got {agent!r}.")
    presets = agent_presets(agent)
    if preset not in presets:
        raise ValueError(f"{agent} has no preset {preset!r}; it has {sorted(presets)}.")
    settings = [*presets[preset], *overrides]
    if agent == "vtrace":
        return VTraceBuilder(parse_overrides(VTraceConfig, settings).for_budget(env_steps))
    from builders.r2d2 import R2D2Builder
    from seed_agents.agents.r2d2.config import R2D2Config

    return R2D2Builder(parse_overrides(R2D2Config, settings))


def score_curve(logdir: str, prefix: str = "") -> list[tuple[int, int, float]]:
    """(frames, games, mean return of the last 100 games) for each row of `train.csv`
    that has a mean return; `prefix="eval_"` reads the evaluation environments' games."""
    curve = []
    with open(os.path.join(logdir, "train.csv"), newline="") as f:
        for row in csv.DictReader(f):
            try:
                mean = float(row[f"{prefix}mean_return"])
                games = int(float(row[f"{prefix}episodes"]))
            except (KeyError, TypeError, ValueError):
                continue
            if np.isfinite(mean):
                curve.append((int(float(row["env_steps"])) * ACTION_REPEAT, games, mean))
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
                 logdir: str, resume: bool, agent: str = "vtrace", preset: str | None = None,
                 overrides: list[str] | tuple[str, ...] = (), env_options: str = "",
                 target: float | None = None, milestones: tuple[float, ...] = (),
                 runners: int = 2, envs_per_runner: int = 32,
                 baseline_games: int = 3,
                 usd_per_vcpu_hour: float = USD_PER_VCPU_HOUR) -> dict:
    """Trains `game` under `protocol` to `frames` (or `minutes` of the run's wall time, all
    pieces counted) in `logdir`, and returns the benchmark's JSON record of it.

    `learn_atari5.py` calls this for each of its games; `main` for one.
    """
    preset = preset or DEFAULT_PRESETS[agent]
    builder = make_builder(agent, preset, overrides, frames // ACTION_REPEAT)
    config = builder.config
    pong = game.lower() == "pong"
    env_id = protocol_env_id(game, protocol)
    if env_options.strip(","):
        env_id = f"{env_id},{env_options.strip(',')}"
    bench = "learn_pong" if pong else f"learn_atari_{game.lower()}"
    if agent != "vtrace":
        bench = f"{bench}_{agent}"
    baseline = random_return(env_id, baseline_games, 10_000 + seed)
    cpu_before, steps_before = process_tree_cpu_s(), logged_env_steps(logdir) if resume else 0
    result = run_local_mp(Experiment(
        builder=builder, environment=env_id, num_runners=runners,
        envs_per_runner=envs_per_runner, max_env_steps=frames // ACTION_REPEAT,
        max_wall_s=minutes * 60.0, seed=seed, logdir=logdir, log_every_s=10.0,
        inference_max_wait_ms=20.0, evaluate_every_s=None, checkpoint_every_s=300.0,
        resume=resume),
        stream=sys.stderr)
    # R2D2 is judged on its evaluation environments' games, as SEED's and Dopamine's
    # curves are on a small epsilon; its exploring environments' games stand beside.
    judged = "eval_" if agent == "r2d2" else ""
    curve = score_curve(logdir, judged)
    for at, games, mean in curve[:: max(1, len(curve) // 40)]:
        print(f"frames {at:>11,}  games {games:>6,}  mean return {mean:6.2f}")
    score = result.eval_mean_return if judged else result.mean_return
    # No game ended yet (a short piece of a long game): no score, the rest still holds.
    value = float(score) if score is not None and np.isfinite(score) else None
    games = curve[-1][1] if curve else 0
    # No ratio against a target at or below random play (Rainbow's DoubleDunk at 10M
    # frames, -18.9, is under a random policy's -18.6): it would not measure progress.
    ratio = (None if target is None or value is None or target <= baseline
             else round((value - baseline) / (target - baseline), 3))
    health = feature_health_summary(logdir)
    cost = piece_cost(logdir, process_tree_cpu_s() - cpu_before,
                      steps_before * ACTION_REPEAT, result.env_steps * ACTION_REPEAT,
                      usd_per_vcpu_hour)
    return {
        "bench": bench,
        "value": None if value is None else round(value, 2),
        "unit": "return",
        "game": game,
        "frames": result.env_steps * ACTION_REPEAT,
        "frame_budget": frames,
        "at_budget": result.env_steps * ACTION_REPEAT >= frames,
        "games": games,
        "frames_to": {f"{m:g}": frames_to(curve, m) for m in milestones},
        "frames_per_s": round(result.env_steps * ACTION_REPEAT / result.wall_s, 1),
        "wall_s": round(result.wall_s, 1),
        "learner_busy_frac": learner_busy_fraction(logdir),
        **cost,
        **health,
        "stop_reason": result.stop_reason,
        "protocol": protocol,
        "env": env_id,
        "agent": agent,
        "preset": preset,
        "overrides": list(overrides),
        **(replay_figures(config, result.mean_return) if agent == "r2d2" else {}),
        "seed": seed,
        "logdir": logdir,
        "baseline": round(baseline, 2),
        "baseline_kind": f"random policy, {baseline_games} games",
        "target": target,
        "ratio": ratio,
        "ratio_kind": "(value - random) / (target - random): 1 meets the target",
        "machine": machine_report(config.precision),
    }


def replay_figures(config, train_mean_return: float) -> dict:
    """R2D2's replay ratio as set (sequences sampled per sequence inserted) and the trained
    rows per env step it makes, beside DQN's 8, and its exploring environments' score."""
    rows = config.samples_per_insert * config.trace_length / config.sequence_period
    return {
        "samples_per_insert": config.samples_per_insert,
        "trained_rows_per_env_step": round(rows, 3),
        "dqn_rows_per_env_step": DQN_ROWS_PER_ENV_STEP,
        "train_mean_return": (round(train_mean_return, 2)
                              if np.isfinite(train_mean_return) else None),
    }


def _last_logged(logdir: str, column: str) -> float:
    """`column` of the last row of the run's train.csv (0 without one)."""
    try:
        with open(os.path.join(logdir, "train.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        return float(rows[-1][column]) if rows else 0.0
    except (OSError, KeyError, ValueError):
        return 0.0


def logged_env_steps(logdir: str) -> int:
    """The env steps of the last row of the run's train.csv (0 without one): where a
    resumed piece starts counting its own frames from."""
    return int(_last_logged(logdir, "env_steps"))


def logged_wall_s(logdir: str) -> float:
    """The run's wall time at the last row of its train.csv (0 without one), all pieces
    counted: what a resumed piece's `--minutes` is measured against."""
    return _last_logged(logdir, "wall_s")


def piece_cost(logdir: str, cpu_s: float, frames_before: int, frames_after: int,
               usd_per_vcpu_hour: float) -> dict:
    """CPU core-seconds per million frames of this piece and of all the run's pieces so far
    (each piece's CPU and frames appended to `<logdir>/cost_pieces.jsonl`), and the
    dollars at `usd_per_vcpu_hour`. Every process of the run is counted (runners,
    learner, inference, replay, the driver). A piece's frames start at the last logged
    row: the frames between the last checkpoint and a stop are played again by the next
    piece, their CPU counted twice and their frames once, so a run made in pieces costs
    a little more per frame than one unbroken."""
    frames = max(frames_after - frames_before, 0)
    path = os.path.join(logdir, "cost_pieces.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps({"cpu_s": round(cpu_s, 1), "frames": frames,
                            "frames_after": frames_after}) + "\n")
    with open(path) as f:
        pieces = [json.loads(line) for line in f if line.strip()]
    total_cpu, total_frames = sum(p["cpu_s"] for p in pieces), sum(p["frames"] for p in pieces)
    per_million = total_cpu / total_frames * 1e6 if total_frames else None
    return {
        "core_s_per_1m_frames": None if per_million is None else round(per_million, 1),
        "piece_core_s_per_1m_frames": round(cpu_s / frames * 1e6, 1) if frames else None,
        "usd_per_1m_frames": None if per_million is None else round(
            usd(per_million, usd_per_vcpu_hour), 4),
        "usd_per_vcpu_hour": usd_per_vcpu_hour,
        "cpu_pieces": len(pieces),
    }


def feature_health_summary(logdir: str) -> dict:
    """The learner's last `live_features`, `value_std` and `entropy` (`learner.csv`), and
    the lowest `live_features` of the run: a run whose network stopped looking at the screen,
    or whose policy is still near uniform at the end, says so in its JSON line."""
    path = os.path.join(logdir, "learner.csv")
    columns: dict[str, list[float]] = {"live_features": [], "value_std": [], "entropy": []}
    if os.path.exists(path):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for key, into in columns.items():
                    try:
                        value = float(row[key])
                    except (KeyError, TypeError, ValueError):
                        continue
                    if math.isfinite(value):  # a step that logged no figure writes nan
                        into.append(value)
    live, value_std, entropy = columns.values()
    return {
        "live_features_last": round(live[-1], 3) if live else None,
        "live_features_min": round(min(live), 3) if live else None,
        "value_std_last": float(f"{value_std[-1]:.3g}") if value_std else None,
        "entropy_last": round(entropy[-1], 3) if entropy else None,
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
    parser.add_argument("--agent", choices=AGENTS, default="vtrace")
    parser.add_argument("--preset", default=None,
                        help="a preset of the agent (default: vtrace atari_ppo, r2d2 atari)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config overrides after the preset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=600.0,
                        help="the run's wall-time limit, all its pieces counted: a --resume "
                             "piece runs until the run's total reaches it")
    parser.add_argument("--baseline-games", type=int, default=3)
    parser.add_argument("--usd-per-vcpu-hour", type=float, default=USD_PER_VCPU_HOUR,
                        help=f"the price of the cost figures (default: {PRICE_SOURCE})")
    parser.add_argument("--logdir", default=None, help="default: runs/learn_pong-<time>")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --logdir (same arguments, more --minutes)")
    args = parser.parse_args()
    if args.resume and not args.logdir:
        parser.error("--resume continues the run in --logdir: name it.")
    args.preset = args.preset or DEFAULT_PRESETS[args.agent]
    if args.preset not in agent_presets(args.agent):
        parser.error(f"--agent {args.agent} has no preset {args.preset!r}; it has "
                     f"{', '.join(sorted(agent_presets(args.agent)))}.")
    pong = args.game.lower() == "pong"
    target = args.target if args.target is not None else (PONG_TARGET if pong else None)
    try:
        milestones = parse_milestones(args.milestones, args.game, target)
    except ValueError as error:
        parser.error(str(error))
    bench = "learn_pong" if pong else f"learn_atari_{args.game.lower()}"
    if args.agent != "vtrace":
        bench = f"{bench}_{args.agent}"
    logdir = args.logdir or time.strftime(f"runs/{bench}-%Y%m%d-%H%M%S")
    if args.resume:
        # --minutes counts the whole run, so that every piece may repeat one command; a
        # total already used up would only start the processes to stop them again.
        spent_min = logged_wall_s(logdir) / 60.0
        if spent_min >= args.minutes:
            parser.error(f"the run in {logdir} has run {spent_min:.1f} min, and --minutes "
                         f"counts all its pieces: pass more than {spent_min:.1f} for "
                         "another piece.")
        print(f"learn_pong: the run has run {spent_min:.1f} min; this piece goes on until "
              f"{args.minutes:g} in all (~{args.minutes - spent_min:.1f} min).",
              file=sys.stderr)
    try:
        record = measure_game(
            game=args.game, protocol=args.protocol, frames=args.frames, seed=args.seed,
            minutes=args.minutes, logdir=logdir, resume=args.resume, agent=args.agent,
            preset=args.preset, overrides=args.overrides, env_options=args.env_options,
            target=target, milestones=milestones, runners=args.runners,
            envs_per_runner=args.envs_per_runner, baseline_games=args.baseline_games,
            usd_per_vcpu_hour=args.usd_per_vcpu_hour)
    except LogdirInUseError as error:  # a piece still running there: nothing was written
        raise SystemExit(f"learn_pong: {error}") from None
    except KeyboardInterrupt:
        # The run stopped its processes (local_mp re-raises once they are down): say how
        # to go on rather than print a traceback.
        print(f"learn_pong: interrupted; every process was stopped. Continue from the newest "
              f"checkpoint with the same arguments plus --logdir {logdir} --resume.",
              file=sys.stderr)
        raise SystemExit(130) from None
    if record["value"] is None:
        raise SystemExit(f"No game of {args.game} ended within the run ({record['frames']:,} "
                         "frames): give it more frames or minutes.")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
