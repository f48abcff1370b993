"""Train V-trace on Atari Pong, sized for a small CPU machine, as local processes.

    python examples/atari_pong.py --minutes 45 --logdir runs/pong

Runner processes step `atari:Pong` (ALE with the standard preprocessing: action repeat 4,
max-pool, 84x84 gray, 4 stacked frames, no-op starts, sticky actions) and stream frames
over gRPC to the learner's central inference server, which runs the Nature CNN for all of
them in one batch. The learner trains V-trace with PPO's clipped objective on clipped
rewards. The run saves checkpoints (continue with --resume) and its learning curve:
`<logdir>/train.csv` (env steps, episodes, mean return of the last 100 episodes, over wall
time), `<logdir>/rates.csv` and TensorBoard under `<logdir>/tb`.

The same run through the command line (`--print-command` prints it for other arguments)::

    seed-agents train --agent vtrace --env atari:Pong --backend local_mp --runners 2 \
        --envs-per-runner 32 --steps 50000000 --max-wall-s 2700.0 --seed 0 \
        --target-return 18.0 --logdir runs/pong --log-every-s 10.0 \
        --inference-max-wait-ms 20.0 --evaluate-every-s 0 --checkpoint-every-s 300.0 \
        --preset atari_cpu
"""

from __future__ import annotations

import argparse
import os
import shlex

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is first imported

from builders.vtrace import VTraceBuilder  # noqa: E402
from launch.backends.local_mp import run_local_mp  # noqa: E402
from launch.experiment import Experiment  # noqa: E402
from seed_agents.agents.vtrace.config import VTraceConfig  # noqa: E402
from seed_agents.agents.vtrace.presets import atari_cpu  # noqa: E402

#: The agent's settings: the `atari_cpu` preset (see its doc for why).
PONG_CONFIG: VTraceConfig = atari_cpu()

ENVIRONMENT = "atari:Pong"
#: Two runners' lockstep batches of 32 frames arrive ~10 ms apart; waiting up to 20 ms
#: lets them share one inference batch of 64 instead of two half batches.
INFERENCE_MAX_WAIT_MS = 20.0
TARGET_RETURN = 18.0
CHECKPOINT_EVERY_S = 300.0
LOG_EVERY_S = 10.0


def command_line(args: argparse.Namespace) -> str:
    """The `seed-agents train` command that runs what `main` runs with `args`."""
    words = [
        "seed-agents", "train", "--agent", "vtrace", "--env", ENVIRONMENT,
        "--backend", "local_mp", "--runners", str(args.runners),
        "--envs-per-runner", str(args.envs_per_runner), "--steps", str(args.steps),
        "--max-wall-s", str(args.minutes * 60.0), "--seed", str(args.seed),
        "--target-return", str(TARGET_RETURN), "--logdir", args.logdir,
        "--log-every-s", str(LOG_EVERY_S),
        "--inference-max-wait-ms", str(INFERENCE_MAX_WAIT_MS), "--evaluate-every-s", "0",
        "--checkpoint-every-s", str(CHECKPOINT_EVERY_S),
        *(["--resume"] if args.resume else []),
    ]
    return shlex.join([*words, "--preset", "atari_cpu"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45.0, help="wall-time limit")
    parser.add_argument("--steps", type=int, default=50_000_000, help="env step budget")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default="runs/pong")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    parser.add_argument("--print-command", action="store_true",
                        help="print the equivalent `seed-agents train` command and exit")
    return parser.parse_args(argv)


def make_experiment(args: argparse.Namespace) -> Experiment:
    return Experiment(
        builder=VTraceBuilder(PONG_CONFIG),
        environment=ENVIRONMENT,
        num_runners=args.runners,
        envs_per_runner=args.envs_per_runner,
        max_env_steps=args.steps,
        max_wall_s=args.minutes * 60.0,
        seed=args.seed,
        target_return=TARGET_RETURN,
        logdir=args.logdir,
        log_every_s=LOG_EVERY_S,
        inference_max_wait_ms=INFERENCE_MAX_WAIT_MS,
        evaluate_every_s=None,  # a Pong episode is minutes of frames: the runners' returns suffice
        checkpoint_every_s=CHECKPOINT_EVERY_S,
        resume=args.resume,
    )


def main() -> None:
    args = parse_args()
    if args.print_command:
        print(command_line(args))
        return
    print(run_local_mp(make_experiment(args)).summary())


if __name__ == "__main__":
    main()
