"""The `seed-agents` command line: `seed-agents train --agent vtrace --env gym:CartPole-v1`."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is first imported

from launch.backends.inprocess import run_inprocess  # noqa: E402
from launch.backends.local_mp import run_local_mp  # noqa: E402
from launch.backends.ray import run_ray  # noqa: E402 - imports Ray only when run
from launch.commands import Agents, add_parsers, failing  # noqa: E402
from launch.commands.agents import (  # noqa: E402
    agent_table,
    builtin_agents,
    builtin_configs,
    make_builder,
    resolve_agent,
)
from launch.commands.evaluation import run_eval  # noqa: E402
from launch.commands.export import run_export  # noqa: E402
from launch.commands.plotting import run_plot  # noqa: E402
from launch.commands.recording import run_record  # noqa: E402
from launch.experiment import Experiment  # noqa: E402
from launch.studies.comparing import compare_runs, format_table, write_csv  # noqa: E402
from launch.studies.results import write_result  # noqa: E402
from seed_agents.agents.mpo.presets import MPO_PRESETS  # noqa: E402
from seed_agents.agents.r2d2.presets import R2D2_PRESETS  # noqa: E402
from seed_agents.agents.td3.presets import TD3_PRESETS  # noqa: E402
from seed_agents.agents.vtrace.presets import VTRACE_PRESETS  # noqa: E402
from seed_agents.inference.security import (  # noqa: E402
    DEFAULT_TLS_SERVER_NAME,
    TLSConfig,
    read_token_file,
)
from seed_agents.utils import storage  # noqa: E402
from seed_agents.utils.checkpointing import has_learner_checkpoint, learner_directory  # noqa: E402
from seed_agents.utils.logdir_lock import LogdirInUseError  # noqa: E402
from seed_agents.utils.overrides import parse_overrides  # noqa: E402
from seed_agents.utils.trackers import DEFAULT_LOGGERS, LOGGERS  # noqa: E402

BACKENDS = {"inprocess": run_inprocess, "local_mp": run_local_mp, "ray": run_ray}
COMMANDS: dict[str, Callable[[argparse.Namespace, Agents], int]] = {
    "eval": run_eval, "export": run_export, "record": run_record, "plot": run_plot,
}
"""The commands after training, each in its module of `launch.commands`."""
PRESETS: dict[str, dict[str, tuple[str, ...]]] = {
    "vtrace": VTRACE_PRESETS,
    "r2d2": R2D2_PRESETS,
    "sac": {},
    "d4pg": {},
    "td3": TD3_PRESETS,
    "mpo": MPO_PRESETS,
    "bc": {},
    "cql": {},
    "iql": {},
}
"""Named settings per agent, applied before `--set` (see seed_agents/agents/*/presets.py)."""


if TYPE_CHECKING:
    from builders.base import AgentBuilder

# The shipped agents' builders import TensorFlow and Reverb (seconds of CPU): the parser
# needs only their configs (`builtin_configs`), so the builders are imported when an
# agent is built, and `--help` or a bad flag answers at once.


@functools.cache
def _agents() -> dict[str, tuple[type, type]]:
    return builtin_agents()


def __getattr__(name: str):
    # `AGENTS`, the shipped agents (name -> (builder, config)), imported on first use.
    if name == "AGENTS":
        return _agents()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _config_help(config_type: type) -> str:
    # The fields' declared defaults, not an instance: a config validates itself on
    # construction (its torso against the table, which imports TensorFlow).
    rows = []
    for f in dataclasses.fields(config_type):
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        rows.append(f"  {f.name}={default}")
    return "\n".join(rows)


def build_parser(extra_configs: dict[str, type] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; `train --help` lists the shipped agents' config fields
    and those of `extra_configs` (a plug-in's, name -> config type)."""
    parser = argparse.ArgumentParser(
        prog="seed-agents",
        description="Train reinforcement-learning agents in the SEED RL architecture, then "
                    "evaluate, export and plot the runs.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    epilog = "\n".join(
        f"{name} config fields (override with --set key=value):\n{_config_help(cfg)}"
        for name, cfg in {**builtin_configs(), **(extra_configs or {})}.items()
    )
    train = commands.add_parser(
        "train",
        help="train an agent",
        description="Train an agent and print progress and a final summary.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("--agent", default="vtrace", metavar="AGENT",
                       help=f"the agent to train: {', '.join(sorted(builtin_configs()))}, "
                            "a plug-in's name (entry-point group seed_agents.agents) or a "
                            "builder's import path, package.module:Builder (default: vtrace)")
    train.add_argument("--env", default="gym:CartPole-v1",
                       help="environment id: gym:<gymnasium id>, atari:<game>[,key=value...], "
                            "dmc:<domain>-<task>, mask:<indices>:<id> or fake:key=value,... "
                            "(default: gym:CartPole-v1; continuous agents: e.g. "
                            "gym:HalfCheetah-v5, dmc:walker-walk)")
    train.add_argument("--backend", choices=sorted(BACKENDS), default="inprocess",
                       help="where components run: inprocess (threads), local_mp (a process "
                            "per node), ray (Ray actors) (default: inprocess)")
    train.add_argument("--inference", choices=["central", "local"], default="central",
                       help="central batched inference (SEED) or a policy copy per actor")
    train.add_argument("--transport", choices=["direct", "grpc"], default="direct",
                       help="central inference: runner threads calling the server directly, "
                            "or runner processes streaming over gRPC (default: direct)")
    train.add_argument("--inference-address", default="127.0.0.1:0",
                       help="where the gRPC inference service listens (host:port or "
                            "unix:/path; default: 127.0.0.1 on a free port)")
    train.add_argument("--inference-token-file", default=None,
                       help="file holding the token runners must present to the gRPC "
                            "inference service (default: a fresh random token per run, "
                            "handed to the runners by the backend)")
    train.add_argument("--tls-cert", default=None,
                       help="PEM certificate of the inference service: serve it over TLS "
                            "(for runners on other hosts; needs --tls-key)")
    train.add_argument("--tls-key", default=None,
                       help="PEM private key of --tls-cert (read on the learner's machine)")
    train.add_argument("--tls-ca", default=None,
                       help="PEM certificate that signed --tls-cert, which runners trust "
                            "(default: trust --tls-cert itself)")
    train.add_argument("--tls-server-name", default=DEFAULT_TLS_SERVER_NAME,
                       help="name runners expect in the certificate's subjectAltName, "
                            "whatever IP they dial (default: %(default)s)")
    train.add_argument("--inference-max-wait-ms", type=float, default=2.0,
                       help="longest a runner's request waits for others to join its "
                            "inference batch (default: 2; pixel envs batch better at ~20)")
    train.add_argument("--ray-address", default=None,
                       help="ray backend: the cluster to join (\"auto\", host:port or "
                            "ray://host:10001); default: start a local Ray for this run")
    train.add_argument("--ray-node-ip", default=None, metavar="IP",
                       help="ray backend, local Ray: the address its node uses (default: "
                            "Ray's pick, the machine's interface address; 127.0.0.2 keeps "
                            "it on loopback); ignored with --ray-address")
    train.add_argument("--learner-gpus", type=float, default=0.0,
                       help="GPUs a cluster backend (ray) reserves for the learner (default: 0)")
    train.add_argument("--replay-port", type=int, default=0,
                       help="the Reverb server's port (default: a free one); pin it to "
                            "name it in a network policy")
    train.add_argument("--learner-resource", default=None, metavar="NAME",
                       help="ray backend: a custom Ray resource the replay and learner nodes "
                            "each take one of, pinning both to the machine (pod) offering it")
    train.add_argument("--runner-resource", default=None, metavar="NAME",
                       help="ray backend: a custom Ray resource each runner takes one of, "
                            "keeping runners on the machines (pods) offering it")
    train.add_argument("--runners", type=int, default=None,
                       help="environment runners (default: the agent's, 4 for vtrace and "
                            "r2d2, 1 for the continuous agents)")
    train.add_argument("--envs-per-runner", type=int, default=None,
                       help="environments each runner steps (default: the "
                            "agent's, 16 for vtrace and r2d2, 4 for the continuous agents)")
    train.add_argument("--runner-groups", type=int, default=None,
                       help="groups a runner's environments step in, alternately: 2 steps "
                            "one group while the other's actions are computed, 1 is "
                            "lockstep (default: 2 from 128 environments per runner, where it "
                            "measured faster, else 1)")
    train.add_argument("--frame-stacking", choices=("auto", "server", "runner"),
                       default="auto",
                       help="where Atari's stack of frames is made: 'server' (runners "
                            "send one frame per step, a quarter of the bytes), 'runner', "
                            "or 'auto' (default: the server under central inference)")
    train.add_argument("--pin-runners", action="store_true",
                       help="pin runner process i to CPU i (modulo the CPUs): each runner's "
                            "emulators stay in one core's caches (2-3%% faster Pong acting on "
                            "2 cores; leave off where other programs share the machine)")
    train.add_argument("--steps", type=int, default=None,
                       help="env step budget (default: 500000); with --dataset, learner "
                            "steps (default: 20000)")
    train.add_argument("--dataset", default=None, metavar="DIR",
                       help="learn offline from this recorded dataset (rlds:DIR for an "
                            "RLDS one, e.g. D4RL's; seed-agents record, "
                            "train --record), with no runners: required by --agent bc, "
                            "cql and iql; other agents learn from it unchanged (in process)")
    train.add_argument("--record", default=None, metavar="DIR",
                       help="write every training episode the runners produce to this new "
                            "dataset directory (central inference; not the evaluation "
                            "environments); rlds:DIR writes an RLDS dataset")
    train.add_argument("--evaluate-every-s", type=float, default=5.0,
                       help="seconds between the evaluator's greedy episodes (every "
                            "backend; 0 disables the evaluator)")
    train.add_argument("--seed", type=int, default=0, help="base random seed")
    train.add_argument("--target-return", type=float, default=None,
                       help="stop once the mean return of the last 100 episodes reaches this")
    train.add_argument("--max-wall-s", type=float, default=None,
                       help="stop after this many seconds")
    train.add_argument("--log-every-s", type=float, default=1.0,
                       help="seconds between progress lines (default: 1)")
    train.add_argument("--logdir", default=None,
                       help="directory for CSV logs and checkpoints "
                            "(default: runs/<agent>-<time>)")
    train.add_argument("--logger", action="append", choices=LOGGERS, default=None,
                       help="where metrics go besides the terminal, repeatable: csv (always "
                            "written), tensorboard, wandb, mlflow (the trackers need "
                            "pip install 'seed-agents[wandb]' or '[mlflow]'; W&B offline "
                            "with WANDB_MODE=offline, MLflow in <logdir>/mlflow.db unless "
                            "MLFLOW_TRACKING_URI is set) (default: csv and tensorboard)")
    train.add_argument("--checkpoint-every-s", type=float, default=600.0,
                       help="seconds between checkpoints of the learner, the counts and "
                            "(for off-policy agents) the replay in <logdir>/checkpoints; "
                            "also saved at shutdown; 0 disables (default: 600)")
    train.add_argument("--resume", action="store_true",
                       help="continue the run in --logdir from its checkpoints; without "
                            "it a logdir that holds checkpoints is refused")
    train.add_argument("--resume-if-checkpointed", action="store_true",
                       help="--resume when --logdir holds a learner checkpoint, else start "
                            "afresh: for a job that a scheduler (a Kubernetes Job, a RayJob "
                            "with backoffLimit) runs again after losing it")
    train.add_argument("--max-node-restarts", type=int, default=0,
                       help="restart a dead learner (local_mp), or the program after a "
                            "vital node or its machine is lost (ray), from the newest "
                            "checkpoints up to N times in the run instead of ending it "
                            "(default: 0)")
    train.add_argument("--preset", default=None,
                       help="named agent settings applied before any --set: "
                            "vtrace: atari_cpu (Atari on a few CPU cores, as "
                            "examples/atari_pong.py trains), atari_ppo (CleanRL PPO's "
                            "Atari settings, rl_games' adaptive learning rate), "
                            "atari_ppo_large (the same with Cleanba's 7,680 samples an "
                            "update, for rare rewards: learn_atari5.py's), minatar "
                            "(MinAtar's minatar:<game> ids); r2d2: minatar, atari; td3: "
                            "td3_bc (TD3+BC for --dataset)")
    train.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE", help="override an agent config field (repeatable)")
    sweep = train.add_argument_group(
        "sweeps", "many seeds and settings in one command, each an ordinary run in "
                  "--logdir PARENT/<setting>/seed-<n> (launch/studies/sweeps.py)")
    sweep.add_argument("--seeds", default=None, metavar="SEEDS",
                       help="run each seed: 0-4, 1,3,5 or 0-2,7 (default: --seed only)")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                       help="run each value of a config field (repeatable: the product of "
                            "the grids); values holding commas are separated by | instead")
    sweep.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="runs of a sweep at a time, each a process with its output in "
                            "PARENT/<setting>/seed-<n>.out (default: 1, on this console)")
    tune = train.add_argument_group(
        "tuning", "a search over config values with early stopping of poor trials, each "
                  "trial an ordinary run in --logdir PARENT/<setting>/seed-<seed> "
                  "(Optuna: launch/studies/tuning.py; pip install 'seed-agents[tune]')")
    tune.add_argument("--search", action="append", default=[], metavar="KEY=SPACE",
                      help="a config field to tune, repeatable: KEY=log:LOW,HIGH, "
                           "float:LOW,HIGH, int:LOW,HIGH or choice:A,B,...")
    tune.add_argument("--trials", type=int, default=8,
                      help="trials of the search, counting those of earlier pieces "
                           "(default: 8; --parallel N runs N at a time)")
    tune.add_argument("--prune", choices=["asha", "none"], default="asha",
                      help="stop poor trials early by successive halving (ASHA), keeping "
                           "the better half at each rung, or not (default: asha)")
    tune.add_argument("--min-steps", type=int, default=None, metavar="N",
                      help="env steps of ASHA's first rung; rungs at N x 2^k "
                           "(default: a quarter of --steps)")
    add_parsers(commands)
    return parser


def make_experiment(args: argparse.Namespace) -> Experiment:
    """The `Experiment` that `seed-agents train` runs for parsed `args`.

    Raises:
      ValueError, TypeError: For a bad config override or experiment setting.
    """
    builder_type, config_type = resolve_agent(args.agent, _agents())
    overrides = list(args.overrides)
    if args.preset is not None:
        presets = PRESETS.get(args.agent, {})
        if args.preset not in presets:
            raise ValueError(
                f"--agent {args.agent} has no preset {args.preset!r}; presets: "
                f"{', '.join(sorted(presets)) or 'none'}."
            )
        overrides = [*presets[args.preset], *overrides]
    config = parse_overrides(config_type, overrides)
    max_env_steps = 500_000 if args.steps is None or args.dataset else args.steps
    if hasattr(config, "for_budget"):  # schedules that end with the run's budget
        config = config.for_budget(max_env_steps)
    builder: AgentBuilder = make_builder(builder_type, config_type, config)
    security = {}  # without a token file, the Experiment makes a fresh random token
    if args.inference_token_file:
        security["inference_token"] = read_token_file(args.inference_token_file)
    if args.tls_cert or args.tls_key or args.tls_ca:
        security["tls"] = TLSConfig(args.tls_cert, args.tls_key, args.tls_ca,
                                    args.tls_server_name or None)
    runners, envs_per_runner = builder.default_layout
    name = args.agent if args.agent in builtin_configs() else builder_type.__name__.lower()
    logdir = args.logdir or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.resume_if_checkpointed and not args.logdir:
        raise ValueError("--resume-if-checkpointed continues the run in --logdir: name it.")
    return Experiment(
        builder=builder,
        environment=args.env,
        num_runners=runners if args.runners is None else args.runners,
        envs_per_runner=envs_per_runner if args.envs_per_runner is None
        else args.envs_per_runner,
        runner_groups=args.runner_groups,
        frame_stacking=args.frame_stacking,
        pin_runners=args.pin_runners,
        max_env_steps=max_env_steps,
        max_learner_steps=20_000 if args.steps is None or not args.dataset else args.steps,
        dataset=args.dataset,
        record=args.record,
        seed=args.seed,
        inference=args.inference,
        transport=args.transport,
        inference_address=args.inference_address,
        inference_max_wait_ms=args.inference_max_wait_ms,
        target_return=args.target_return,
        max_wall_s=args.max_wall_s,
        log_every_s=args.log_every_s,
        logdir=logdir,
        loggers=tuple(getattr(args, "logger", None) or DEFAULT_LOGGERS),
        evaluate_every_s=args.evaluate_every_s or None,
        learner_gpus=args.learner_gpus,
        replay_port=args.replay_port,
        learner_resource=args.learner_resource,
        runner_resource=args.runner_resource,
        checkpoint_every_s=args.checkpoint_every_s or None,
        resume=args.resume or (args.resume_if_checkpointed and has_learner_checkpoint(
            learner_directory(logdir))),
        max_node_restarts=args.max_node_restarts,
        **security,
    )


LOST_FINAL_CHECKPOINT = 3
"""`train`'s exit status when the learner's last save did not finish before the stop."""


def train(args: argparse.Namespace) -> int:
    def run_command(spec: str) -> list[str]:  # one run of a sweep or a search
        return [sys.executable, "-m", "launch.commands.cli", RUN_SPEC, spec]

    if getattr(args, "search", None):
        from launch.studies.tuning import run_search

        return run_search(args, make_experiment, run_command)
    if getattr(args, "seeds", None) or getattr(args, "grid", None):
        from launch.studies.sweeps import run_sweep

        return run_sweep(args, make_experiment, run_command)
    try:
        experiment = make_experiment(args)
        experiment.check_checkpoints()  # the backends check too; here the error is short
        experiment.environment_spec()  # an action spec the agent cannot use, likewise
    except (ValueError, TypeError) as error:
        print(f"seed-agents: error: {error}", file=sys.stderr)
        return 2
    if experiment.dataset:
        return _train_offline(args, experiment)
    # Only the in-process backend has a choice of transport: the others always use gRPC.
    how = f"{args.inference} inference, {args.transport} transport" \
        if args.backend == "inprocess" else "central inference over gRPC"
    print(f"Training {args.agent} on {args.env} ({args.backend}, {experiment.num_envs} envs, "
          f"{how}); logs in {experiment.logdir}", flush=True)
    try:
        run = BACKENDS[args.backend]
        if args.backend == "ray":
            run = functools.partial(run, address=args.ray_address,
                                    node_ip_address=args.ray_node_ip)
        result = run(experiment)
    except LogdirInUseError as error:  # another run took the logdir since the check above
        print(f"seed-agents: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seed-agents: interrupted; every node was stopped.", file=sys.stderr)
        return 130
    print(result.summary(), flush=True)
    if experiment.logdir and not storage.is_url(experiment.logdir):
        # A run that ended by its limits says so: a sweep skips it on --resume, and
        # `compare` reads its final figures.
        write_result(experiment.logdir, result)
    # The run trained, but resuming it would repeat what came after its newest checkpoint.
    return LOST_FINAL_CHECKPOINT if result.lost_final_checkpoint else 0


def _train_offline(args: argparse.Namespace, experiment: Experiment) -> int:
    from launch.backends.offline import run_offline
    from seed_agents.datasets import DatasetError

    if args.backend != "inprocess":
        print("seed-agents: error: --dataset runs in process (no runners to spread): "
              "use --backend inprocess.", file=sys.stderr)
        return 2
    print(f"Training {args.agent} offline on {args.dataset} (evaluating in {args.env}, "
          f"{experiment.max_learner_steps:,} learner steps); logs in {experiment.logdir}",
          flush=True)
    try:
        result = run_offline(experiment)
    except (DatasetError, LogdirInUseError) as error:
        print(f"seed-agents: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seed-agents: interrupted.", file=sys.stderr)
        return 130
    print(result.summary(), flush=True)
    return 0


RUN_SPEC = "--sweep-run"
"""`seed-agents --sweep-run FILE`: one run of a sweep, its `train` arguments in FILE (JSON)."""


def _train_sweep_run(path: str) -> int:
    import json
    import signal

    # The sweep stops its runs with SIGINT: a run answers it even where the sweep was
    # started with SIGINT ignored, which its processes inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with open(path) as f:
        return train(argparse.Namespace(**json.load(f)))


@failing
def _run_compare(args: argparse.Namespace, agents: Agents) -> int:
    comparison = compare_runs(args.runs, normalize=args.normalize, reps=args.reps,
                              unfinished=args.unfinished)
    print(format_table(comparison), flush=True)
    parent = next((p for p in args.runs if not os.path.isfile(os.path.join(p, "train.csv"))),
                  None)
    out = args.out or os.path.join(parent or ".", "compare.csv")
    write_csv(comparison, out)
    print(f"table: {out}", flush=True)
    return 0


COMMANDS["compare"] = _run_compare


def _plugin_configs(argv: Sequence[str]) -> dict[str, type]:
    """For `train --agent NAME --help` where NAME is not a shipped agent: {NAME: its
    config type}, so that the help lists the plug-in's fields as it does the shipped
    ones' (resolving imports the plug-in: only done when help is asked for)."""
    if not argv or argv[0] != "train" or not {"-h", "--help"} & set(argv):
        return {}
    name = None
    for i, arg in enumerate(argv):
        if arg == "--agent" and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("--agent="):
            name = arg.partition("=")[2]
    if name is None or name in builtin_configs():
        return {}
    return {name: resolve_agent(name, builtins={})[1]}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == RUN_SPEC:
        return _train_sweep_run(argv[1])
    try:
        extra = _plugin_configs(argv)
    except ValueError as error:
        print(f"seed-agents train: error: {error}", file=sys.stderr)
        return 2
    args = build_parser(extra).parse_args(argv)
    if args.command == "train":
        return train(args)
    agent = getattr(args, "agent", None)
    try:
        agents = agent_table(agent)
    except ValueError as error:
        print(f"seed-agents {args.command}: error: {error}", file=sys.stderr)
        return 2
    return COMMANDS[args.command](args, agents)


if __name__ == "__main__":
    sys.exit(main())
