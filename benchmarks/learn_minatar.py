"""MinAtar at the anchors' frame budgets: is the pixel learner as sample-efficient as theirs?

    python benchmarks/learn_minatar.py [--games breakout,space_invaders,asterix]
                                       [--agent vtrace|r2d2] [--frames N] [--seeds 2]
                                       [--first-seed 0] [--results-dir DIR] [--minutes M]
                                       [--preset minatar] [--set key=value ...]

Trains the agent on each `minatar:<game>` (the published protocol: sticky actions 0.1,
difficulty ramping, no episode cap but Freeway's own 2500 frames; the minimal action set,
where the MinAtar paper's curves used all six actions, as `minatar:<game>,full_actions=1`
does) as local processes, the SEED data path of docs/architecture.md (runner processes
over gRPC, central batched inference next to the learner, Reverb),
for `--frames` frames each (MinAtar has no frame skip: a frame is an env step; the default
is the largest budget among the agent's anchors). Per game it reports, for every seed:

- `final_return`: the mean return of the last 100 training episodes at the budget, the
  figure the anchors publish;
- `eval_return`: the mean of `--eval-episodes` greedy episodes of the final checkpoint;
- `return_at`: the 100-episode mean at each anchor's budget (read off the run's curve; a
  run shorter than a budget gives its final figure, reached with fewer frames);
- `frames_to_half`: the frames at which the 100-episode mean first reached half of each
  anchor's score (null: never);

and, beside them, a uniformly random policy's return measured in the same run and the
published anchors (`ANCHORS`: name, algorithm, budget, score, source), with `meets`: whether
the mean over seeds of the return at each anchor's budget reached its score.

The last line is one JSON object: `value` is the mean over games and seeds of the final
return; `ratio` the mean over games of (final - random) / (anchor - random) for the agent's
first anchor, so 1 is the anchors' sample efficiency and 0 random play.

Runs are made in pieces: with `--results-dir DIR` each run's logdir is `DIR/runs/...` and
each finished seed's figures `DIR/<agent>_<game>_seed<S>.json`, with the settings it ran
under. A later invocation with the same settings reuses finished seeds, resumes unfinished
ones from their checkpoints, and `--minutes` bounds the wall time of one invocation (the
run it stops resumes next time). A results directory holding runs of other settings is
refused, never mixed in. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GAMES = ("breakout", "space_invaders", "asterix")
AGENTS = ("vtrace", "r2d2")
LAST_EPISODES = 100  # the anchors' final figure: the mean of the last 100 episodes

# Published results at fixed frame budgets, per agent family: the first of each agent's
# list is its primary anchor (the JSON's ratio). Sources in docs/atari.md (MinAtar).
# The MinAtar paper's scores are read off its learning-curve figure (the mean of 30 seeds'
# 100-episode moving averages; about +-1, +-5 on Space Invaders): the paper has no table.
_MINATAR_PAPER = ("Young & Tian 2019, arXiv:1903.03176, github.com/kenjyoung/MinAtar "
                  "img/learning_curves.gif (read off the curves at 5M frames)")
ANCHORS: dict[str, list[dict[str, Any]]] = {
    "vtrace": [
        {"name": "minatar_ac_lambda", "algorithm": "AC(0.8), online actor-critic with traces",
         "budget": 5_000_000, "source": _MINATAR_PAPER,
         "scores": {"breakout": 17.5, "space_invaders": 185.0, "asterix": 19.0,
                    "freeway": 47.0, "seaquest": 15.0}},
        {"name": "gymnax_ppo", "algorithm": "PPO (gymnax-blines, 64 envs, MLP 2x256)",
         "budget": 10_000_000,
         "source": "github.com/RobertTLange/gymnax README (checkpoint returns 'R') and "
                   "gymnax-blines agents/<game>/ppo.yaml (num_train_steps 1e7)",
         "scores": {"breakout": 28.0, "space_invaders": 131.0, "asterix": 15.0,
                    "freeway": 58.0}},
    ],
    "r2d2": [
        {"name": "minatar_dqn", "algorithm": "DQN with replay (the paper's small network)",
         "budget": 5_000_000, "source": _MINATAR_PAPER,
         "scores": {"breakout": 10.0, "space_invaders": 43.0, "asterix": 17.0,
                    "freeway": 50.0, "seaquest": 20.0}},
    ],
}


def anchors_for(agent: str, game: str) -> list[dict[str, Any]]:
    """The anchors of `agent` with a score for `game`, each with that score as `score`."""
    out = []
    for anchor in ANCHORS[agent]:
        score = anchor["scores"].get(game)
        if score is not None:
            out.append({k: v for k, v in anchor.items() if k != "scores"} | {"score": score})
    return out


def default_frames(agent: str) -> int:
    return max((a["budget"] for a in ANCHORS[agent]), default=5_000_000)


def score_curve(logdir: str) -> list[tuple[int, int, float]]:
    """(frames, episodes, mean return of the last 100 episodes) per row of train.csv."""
    curve = []
    path = os.path.join(logdir, "train.csv")
    if not os.path.exists(path):
        return curve
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                mean = float(row["mean_return"])
            except (TypeError, ValueError):
                continue
            if mean == mean:  # not NaN
                curve.append((int(float(row["env_steps"])), int(float(row["episodes"])), mean))
    return curve


def return_at(curve: list[tuple[int, int, float]], frames: int,
              final: tuple[int, float]) -> float | None:
    """The 100-episode mean at `frames`: the last row at or before it, or the run's final
    figure (`final`: its frames and mean) when the run ended at or before `frames`, i.e.
    had no more frames than an anchor with that budget. None: no row that early."""
    final_frames, final_mean = final
    if final_frames <= frames or (final_frames - frames) < 0.01 * frames:
        return round(final_mean, 2)  # the budget's last log row can overshoot it a little
    before = [mean for f, _, mean in curve if f <= frames]
    return round(before[-1], 2) if before else None


def frames_to(curve: list[tuple[int, int, float]], score: float) -> int | None:
    return next((f for f, episodes, mean in curve
                 if episodes >= LAST_EPISODES and mean >= score), None)


def make_config(agent: str, preset: str | None, overrides: list[str], frames: int) -> Any:
    """The agent's config: the preset, then the overrides, then (V-trace) the schedules
    spread over `frames` (`VTraceConfig.for_budget`)."""
    from seed_agents.utils.overrides import parse_overrides

    if agent == "vtrace":
        from seed_agents.agents.vtrace import presets
        from seed_agents.agents.vtrace.config import VTraceConfig

        settings = [*presets.VTRACE_PRESETS[preset], *overrides] if preset else overrides
        return parse_overrides(VTraceConfig, settings).for_budget(frames)
    from seed_agents.agents.r2d2 import presets as r2d2_presets
    from seed_agents.agents.r2d2.config import R2D2Config

    settings = [*r2d2_presets.R2D2_PRESETS[preset], *overrides] if preset else overrides
    return parse_overrides(R2D2Config, settings)


def make_builder(agent: str, config: Any) -> Any:
    if agent == "vtrace":
        from builders.vtrace import VTraceBuilder

        return VTraceBuilder(config)
    from builders.r2d2 import R2D2Builder

    return R2D2Builder(config)


def settings(args: argparse.Namespace, game: str) -> dict[str, Any]:
    """What a seed's figures depend on besides the seed: runs are summarized together only
    when they agree on all of it."""
    return {"agent": args.agent, "env": f"minatar:{game}", "frames": args.frames,
            "preset": args.preset, "overrides": list(args.overrides),
            "runners": args.runners, "envs_per_runner": args.envs_per_runner,
            "eval_episodes": args.eval_episodes}


def _result_path(args: argparse.Namespace, game: str, seed: int) -> str:
    return os.path.join(args.results_dir, f"{args.agent}_{game}_seed{seed}.json")


def _logdir(args: argparse.Namespace, game: str, seed: int) -> str:
    return os.path.join(args.results_dir, "runs", f"{args.agent}-{game}-seed{seed}")


def stored_result(args: argparse.Namespace, game: str, seed: int) -> dict[str, Any] | None:
    """A finished seed's figures from the results directory; SystemExit when they (or its
    unfinished run) were made with other settings."""
    path = _result_path(args, game, seed)
    settings_path = os.path.join(_logdir(args, game, seed), "benchmark_settings.json")
    for candidate in (path, settings_path):
        if os.path.exists(candidate):
            with open(candidate) as f:
                stored = json.load(f)
            if stored.get("settings") != settings(args, game):
                raise SystemExit(f"{candidate} was made with settings {stored.get('settings')}"
                                 f", not {settings(args, game)}: use another --results-dir "
                                 "or the same settings.")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["result"]


def _write_json(path: str, payload: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:  # whole, then renamed: a killed run leaves no half
        json.dump(payload, f)
    os.replace(path + ".tmp", path)


def _wall_so_far(logdir: str) -> float:
    """Wall seconds of the run's earlier pieces (the last `wall_s` of its train.csv)."""
    path = os.path.join(logdir, "train.csv")
    if not os.path.exists(path):
        return 0.0
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["wall_s"]) if rows else 0.0


def run_seed(args: argparse.Namespace, game: str, seed: int,
             deadline: float) -> dict[str, Any] | None:
    """Trains (or resumes) one seed; its figures, or None when `deadline` stopped it."""
    from launch.backends.local_mp import run_local_mp
    from launch.commands.evaluation import evaluate
    from launch.experiment import Experiment
    from launch.restore import load_run
    from seed_agents.utils.checkpointing import find_checkpoint, learner_directory

    logdir = _logdir(args, game, seed)
    try:
        find_checkpoint(learner_directory(logdir), None)
        resume = True
    except ValueError:
        resume = False
        # A piece killed before its first checkpoint: nothing to resume, and its CSVs
        # would splice two runs into one curve.
        shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir, exist_ok=True)
    _write_json(os.path.join(logdir, "benchmark_settings.json"),
                {"settings": settings(args, game)})
    config = make_config(args.agent, args.preset, args.overrides, args.frames)
    remaining = deadline - time.monotonic()
    if remaining < 60:
        return None
    # max_wall_s counts the pieces before this one too (restored with the run).
    result = run_local_mp(Experiment(
        builder=make_builder(args.agent, config), environment=f"minatar:{game}",
        num_runners=args.runners, envs_per_runner=args.envs_per_runner,
        max_env_steps=args.frames, max_wall_s=_wall_so_far(logdir) + remaining, seed=seed,
        logdir=logdir, log_every_s=10.0, inference_max_wait_ms=args.inference_max_wait_ms,
        evaluate_every_s=None, checkpoint_every_s=120.0, resume=resume), stream=sys.stderr)
    if result.env_steps < args.frames:
        print(f"{game} seed {seed}: stopped at {result.env_steps:,} of {args.frames:,} "
              f"frames ({result.stop_reason}); run again to resume", file=sys.stderr)
        return None
    run = load_run(logdir, builder=make_builder(args.agent, config))
    evaluation = evaluate(run, episodes=args.eval_episodes, seed=seed + 999_983,
                          max_steps=args.eval_max_steps)
    out = {
        "seed": seed,
        "final_return": round(result.mean_return, 2),
        "eval_return": round(sum(evaluation.returns) / len(evaluation.returns), 2),
        "env_steps": result.env_steps,
        "episodes": result.episodes,
        "learner_steps": result.learner_steps,
        "wall_s": round(result.wall_s, 1),
        "frames_per_s": round(result.env_steps / max(result.wall_s, 1e-9), 1),
        "logdir": logdir,
    }
    print(f"{game} seed {seed}: {out}", file=sys.stderr, flush=True)
    return out


def with_anchor_figures(run: dict[str, Any], anchors: list[dict[str, Any]]) -> dict[str, Any]:
    """A seed's stored figures plus those read off its curve against each anchor: read at
    summary time, so that the anchors table can grow without training again."""
    curve = score_curve(run["logdir"])
    final = (run["env_steps"], run["final_return"])
    return {**run,
            "return_at": {str(a["budget"]): return_at(curve, a["budget"], final)
                          for a in anchors},
            "frames_to_half": {a["name"]: frames_to(curve, a["score"] / 2) for a in anchors}}


def summarize_game(args: argparse.Namespace, game: str, runs: list[dict[str, Any]],
                   random: float) -> dict[str, Any]:
    anchors = anchors_for(args.agent, game)
    runs = [with_anchor_figures(run, anchors) for run in runs]
    meets = {}
    for anchor in anchors:
        at_budget = [r["return_at"].get(str(anchor["budget"])) for r in runs]
        known = [x for x in at_budget if x is not None]
        meets[anchor["name"]] = (round(statistics.mean(known), 2) >= anchor["score"]
                                 if len(known) == len(runs) and known else None)
    return {
        "env": f"minatar:{game}",
        "final_return": round(statistics.mean(r["final_return"] for r in runs), 2),
        "eval_return": round(statistics.mean(r["eval_return"] for r in runs), 2),
        "random_return": round(random, 2),
        "anchors": anchors,
        "meets": meets,
        "per_seed": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default=",".join(GAMES),
                        help="comma-separated MinAtar games (default: %(default)s)")
    parser.add_argument("--agent", choices=AGENTS, default="vtrace")
    parser.add_argument("--frames", type=int, default=None,
                        help="frames (= env steps) per run; default: the agent's largest "
                             "anchor budget")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--preset", default="minatar",
                        help="the agent's named settings, before --set ('' for none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config overrides after the preset")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=32)
    parser.add_argument("--inference-max-wait-ms", type=float, default=5.0)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--eval-max-steps", type=int, default=20_000,
                        help="greedy episodes are cut after this many steps")
    parser.add_argument("--random-episodes", type=int, default=100)
    parser.add_argument("--results-dir", default=None,
                        help="keep runs and figures here; reuse or resume what is there "
                             "(default: a fresh runs/learn_minatar-<time>)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="wall-time bound of this invocation; a run it stops resumes "
                             "next time from its checkpoint")
    args = parser.parse_args()

    from seed_agents.envs.minatar import game_name

    try:
        games = [game_name(g) for g in args.games.split(",") if g.strip()]
    except ValueError as e:
        parser.error(str(e))
    args.preset = args.preset or None
    if args.frames is None:
        args.frames = default_frames(args.agent)
    if args.frames < 1 or args.seeds < 1:
        parser.error("--frames and --seeds must be >= 1")
    try:  # a bad preset or override fails here, before any run
        make_config(args.agent, args.preset, args.overrides, args.frames)
    except (KeyError, ValueError) as e:
        parser.error(f"bad --preset or --set: {e}")
    args.results_dir = args.results_dir or time.strftime("runs/learn_minatar-%Y%m%d-%H%M%S")
    os.makedirs(args.results_dir, exist_ok=True)
    deadline = time.monotonic() + (args.minutes * 60 if args.minutes else float("inf"))

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    stored = {(g, s): stored_result(args, g, s) for g in games for s in seeds}
    reused = [f"{g}:{s}" for (g, s), r in stored.items() if r is not None]
    start = time.monotonic()
    for (game, seed), result in stored.items():
        if result is None:
            result = run_seed(args, game, seed, deadline)
            if result is not None:
                _write_json(_result_path(args, game, seed),
                            {"settings": settings(args, game), "result": result})
            stored[game, seed] = result
    missing = [f"{g}:{s}" for (g, s), r in stored.items() if r is None]

    from seed_agents.envs.random_play import random_return
    from seed_agents.utils.reference import machine_report

    report = {}
    for game in games:
        runs = [stored[game, s] for s in seeds if stored[game, s] is not None]
        if runs:
            random = random_return(f"minatar:{game}", args.random_episodes, 12_345)
            report[game] = summarize_game(args, game, runs, random)
    finals = [r["final_return"] for g in report.values() for r in g["per_seed"]]
    ratios = [(g["final_return"] - g["random_return"])
              / (g["anchors"][0]["score"] - g["random_return"])
              for g in report.values() if g["anchors"]]
    config = make_config(args.agent, args.preset, args.overrides, args.frames)
    print(json.dumps({
        "bench": "learn_minatar",
        "value": round(statistics.mean(finals), 2) if finals else None,
        "unit": "return",
        "agent": args.agent,
        "frames": args.frames,
        "seeds": list(seeds),
        "games": report,
        "unfinished": missing,
        "reused": reused,
        "wall_s": round(time.monotonic() - start, 1),
        "baseline": (round(statistics.mean(g["random_return"] for g in report.values()), 2)
                     if report else None),
        "baseline_kind": f"random policy, {args.random_episodes} episodes per game",
        "ratio": round(statistics.mean(ratios), 3) if ratios else None,
        "ratio_kind": "mean over games of (final - random) / (first anchor - random)",
        "preset": args.preset,
        "overrides": args.overrides,
        "results_dir": args.results_dir,
        "machine": machine_report(getattr(config, "precision", "float32")),
    }))


if __name__ == "__main__":
    main()
