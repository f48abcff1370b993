"""The `seed-agents` command line: `cli` (the parser, `main` and `train`), and a module per
command a user reaches for after training: `evaluation` (`seed-agents eval`), `export`,
`recording` (`record`) and `plotting` (`plot`), each with its handler.

Each of those takes a run's logdir (what `seed-agents train` printed); the run's
`run.json` rebuilds its agent, so no training flag has to be repeated. Errors (no
checkpoint, a checkpoint of another run, an environment that cannot render, an existing
output directory) print one line and exit with status 2, having written nothing.

Here: their arguments (`add_parsers`) and what their handlers share. This module imports
none of its package's modules, which import it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any

Agents = Mapping[str, tuple[type, type]]


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--logdir and --checkpoint: which run, and which of its checkpoints."""
    parser.add_argument("--logdir", required=True, help="the run's directory")
    parser.add_argument("--checkpoint", default=None,
                        help="ckpt-N, N or a checkpoint path (default: the newest)")
    parser.add_argument("--agent", default=None, metavar="AGENT",
                        help="the run's agent when seed-agents does not ship it: a plug-in's "
                             "name or the builder's import path, package.module:Builder "
                             "(a run's record is never imported from by itself)")


def add_parsers(commands: Any) -> None:
    """Adds the eval, export, record and plot subcommands to `seed-agents`' subparsers."""
    evaluate = commands.add_parser(
        "eval", help="play greedy episodes of a trained run",
        description="Restore a run's latest (or a named) checkpoint with its own config, "
                    "play greedy episodes, print return and length statistics and write "
                    "them as JSON.")
    _add_run_arguments(evaluate)
    evaluate.add_argument("--episodes", type=int, default=10,
                          help="greedy episodes to play (default: 10)")
    evaluate.add_argument("--env", default=None,
                          help="environment id to play in instead of the run's (same "
                               "observations and actions)")
    evaluate.add_argument("--seed", type=int, default=None,
                          help="environment and policy seed (default: the run's seed + "
                               "999983, as its evaluator plays)")
    evaluate.add_argument("--video", default=None, metavar="FILE.mp4",
                          help="record the first episode(s) as MP4 (gym: rgb_array and "
                               "atari: environments)")
    evaluate.add_argument("--video-episodes", type=int, default=1,
                          help="episodes recorded with --video (default: 1)")
    evaluate.add_argument("--max-steps", type=int, default=None,
                          help="cut episodes after this many steps (default: the "
                               "environment's own limit)")
    evaluate.add_argument("--json", default=None, metavar="FILE",
                          help="where the results go (default: "
                               "<logdir>/eval/<checkpoint>-<time>.json)")

    export = commands.add_parser(
        "export", help="export a trained run's policy as a TensorFlow SavedModel",
        description="Write the acting policy of a run's latest (or a named) checkpoint as "
                    "a SavedModel that loads with tf.saved_model.load, without seed-agents: "
                    "functions greedy_step and sample_step (observation, previous action, "
                    "recurrent state in; action, extras, state out) and initial_state.")
    _add_run_arguments(export)
    export.add_argument("--out", required=True, help="a new (or empty) directory")
    export.add_argument("--seed", type=int, default=0,
                        help="where the sampling policy's generator starts (default: 0)")
    export.add_argument("--onnx", action="store_true",
                        help="also convert the greedy policy to ONNX (needs the onnx extra: "
                             "pip install 'seed-agents[onnx]')")

    record = commands.add_parser(
        "record", help="record episodes of a trained run as a dataset",
        description="Restore a run's latest (or a named) checkpoint, play episodes with "
                    "its greedy (deterministic) policy, optionally with epsilon-random "
                    "actions (discrete) or Gaussian noise (continuous), and write them "
                    "whole to a new dataset directory (TFRecord files and spec.json: see "
                    "docs/offline.md, The dataset format) that `train --dataset` learns from, "
                    "or, with --format rlds, an RLDS (TFDS) dataset that other toolkits read "
                    "and `train --dataset rlds:DIR` learns from.")
    _add_run_arguments(record)
    record.add_argument("--episodes", type=int, required=True, help="episodes to record")
    record.add_argument("--out", required=True, help="a new (or empty) directory")
    record.add_argument("--format", choices=("episodes", "rlds"), default="episodes",
                        help="episodes: seed-agents' own format (default); rlds: an RLDS "
                             "dataset (TFDS directory; needs the rlds extra)")
    record.add_argument("--epsilon", type=float, default=0.0,
                        help="share of uniform random actions (discrete; default: 0)")
    record.add_argument("--noise", type=float, default=0.0,
                        help="standard deviation of Gaussian noise added to actions in "
                             "[-1, 1] (continuous; default: 0)")
    record.add_argument("--seed", type=int, default=0,
                        help="environment, policy and exploration seed (default: 0)")
    record.add_argument("--envs", type=int, default=8,
                        help="environments acting side by side (default: 8)")

    plot = commands.add_parser(
        "plot", help="learning curves of runs, or of a sweep's settings over their seeds",
        description="Plot mean return against env steps (or frames) and wall time (and "
                    "greedy evaluation returns where a run has them); the runs of a "
                    "setting (a sweep's PARENT/<setting>/seed-<n>, or runs of one config) "
                    "are drawn as their mean or IQM with a 95%% bootstrap band.")
    plot.add_argument("runs", nargs="+", metavar="RUN",
                      help="runs' logdirs, or parents of runs (a sweep's --logdir)")
    plot.add_argument("--out", default="curves.png", help="the PNG to write "
                                                          "(default: curves.png)")
    plot.add_argument("--title", default=None, help="the figure's title")
    plot.add_argument("--statistic", choices=("mean", "iqm"), default="mean",
                      help="each setting's line over its runs (default: mean)")
    plot.add_argument("--band", choices=("auto", "ci", "range"), default="auto",
                      help="ci: the 95%% stratified-bootstrap interval of the statistic "
                           "(rliable: pip install 'seed-agents[stats]'); range: min to max; "
                           "auto: ci where rliable is installed (default)")
    plot.add_argument("--frames-per-step", type=int, default=1, metavar="N",
                      help="draw against frames, N per env step (Atari: 4) (default: 1, "
                           "env steps)")

    compare = commands.add_parser(
        "compare", help="a table of each setting's final score over its seeds, with CIs",
        description="For each setting (a sweep's PARENT/<setting>, or runs of one config): "
                    "the final score's IQM and mean with 95%% stratified-bootstrap "
                    "confidence intervals over its seeds (rliable), the number of seeds, "
                    "and for several tasks normalized scores; with several settings, the "
                    "probability of improvement of each over each. Written as CSV too.")
    compare.add_argument("runs", nargs="+", metavar="RUN",
                         help="parents of runs (a sweep's --logdir), or runs' logdirs")
    compare.add_argument("--out", default=None,
                         help="the CSV to write (default: <first parent>/compare.csv)")
    compare.add_argument("--normalize", choices=("auto", "human", "minmax", "none"),
                         default="auto",
                         help="scores across tasks: human (Atari: (score - random) / "
                              "(human - random)), minmax (over the compared runs, per task), "
                              "none; auto: none for one task, human where every task has "
                              "reference scores, else minmax (default)")
    compare.add_argument("--reps", type=int, default=10_000,
                         help="bootstrap resamples (default: 10000)")
    compare.add_argument("--unfinished", action="store_true",
                         help="count runs that did not finish, at their last score "
                              "(default: left out and listed)")


def failing(command: Callable[[argparse.Namespace, Agents], int]) -> Callable[..., int]:
    def run(args: argparse.Namespace, agents: Agents) -> int:
        try:
            return command(args, agents)
        except ValueError as error:
            print(f"seed-agents {args.command}: error: {error}", file=sys.stderr)
            return 2

    return run


def quiet_tensorflow() -> None:
    """Keeps TensorFlow's Python warnings (tf2onnx, SavedModel) off the command's output."""
    import logging

    logging.getLogger("tensorflow").setLevel(logging.ERROR)
