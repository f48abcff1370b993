"""Train V-trace on Atari Pong, sized for a small CPU machine, as local processes.

    python examples/atari_pong.py --minutes 45 --logdir runs/pong

Runner processes step `atari:Pong` (ALE with the standard preprocessing: action repeat 4,
max-pool, 84x84 gray, 4 stacked frames, no-op starts, sticky actions) and stream frames
over gRPC to the learner's central inference server, which runs the Nature CNN for all of
them in one batch. The learner trains APPO-flavoured V-trace on clipped rewards. The run
saves checkpoints (continue with --resume) and its learning curve: `<logdir>/train.csv`
(env steps, episodes, mean return of the last 100 episodes, over wall time),
`<logdir>/rates.csv` and TensorBoard under `<logdir>/tb`. The same run from the command
line::

    seed-agents train --agent vtrace --env atari:Pong --backend local_mp --runners 2 \\
        --envs-per-runner 32 --steps 50000000 --max-wall-s 2700 --logdir runs/pong \\
        --set torso=nature_cnn --set hidden_sizes=512, ...   (the fields of PONG_CONFIG)
"""

from __future__ import annotations

import argparse

from builders.vtrace import VTraceBuilder
from launch.experiment import Experiment
from launch.local_mp import run_local_mp
from seed_agents.agents.vtrace.config import VTraceConfig

#: A CPU-sized configuration: one gradient pass per batch (the learner is the bottleneck
#: on a few cores), a shared Nature-CNN torso, rewards clipped to [-1, 1].
PONG_CONFIG = VTraceConfig(
    torso="nature_cnn",
    hidden_sizes=(512,),
    separate_value_torso=False,
    learning_rate=6e-4,
    adam_epsilon=1e-5,
    adam_beta2=0.99,
    discount=0.99,
    unroll_length=32,
    batch_size=16,
    queue_size=32,
    sgd_steps_per_batch=1,
    ppo_clip=0.2,
    entropy_cost=0.01,
    reward_clip=1.0,
    max_gradient_norm=40.0,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45.0, help="wall-time limit")
    parser.add_argument("--steps", type=int, default=50_000_000, help="env step budget")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default="runs/pong")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    args = parser.parse_args()

    experiment = Experiment(
        builder=VTraceBuilder(PONG_CONFIG),
        environment="atari:Pong",
        num_runners=args.runners,
        envs_per_runner=args.envs_per_runner,
        max_env_steps=args.steps,
        max_wall_s=args.minutes * 60.0,
        seed=args.seed,
        target_return=18.0,
        logdir=args.logdir,
        log_every_s=10.0,
        evaluate_every_s=None,  # a Pong episode is minutes of frames: the runners' returns suffice
        checkpoint_every_s=300.0,
        resume=args.resume,
    )
    print(run_local_mp(experiment).summary())


if __name__ == "__main__":
    main()
