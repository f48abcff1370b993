"""The phases of `atari_throughput.py`, each a measuring function, and the processes they spawn.

`atari_throughput.py` runs them one after the other and reports; this module holds what
each measures (see that module's docstring for the phases and the figures) and the
harness of the spawned processes: each child builds what it needs, reports ready, then
waits for its (start, end) window, so that every child of a phase steps at the same moment.

Top-level imports stay light: spawned processes import this module, and runner and
environment processes must not load TensorFlow.
"""

from __future__ import annotations

import csv
import dataclasses
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seed_agents.utils.phases import run_in_window, wait_for_window

ENV_ID = "atari:Pong"
ACTION_REPEAT = 4  # emulator frames per agent step in `atari:Pong`: frames = steps * 4
_READY_TIMEOUT_S = 300.0  # spawning and importing, on a loaded machine


# --- spawned processes ------------------------------------------------------------------
#
# Each child builds what it needs, reports ready, then waits for its (start, end) window:
# every child of a phase starts stepping at the same moment, and the warm-up before `start`
# (connections, tracing, caches) is excluded from the count.


def _machine_idle_s() -> float:
    """Seconds all cores have spent idle since boot (Linux /proc/stat); NaN elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return float("nan")
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")  # idle, iowait


class _CpuWindow:
    """CPU time between two moments: this process's (all its threads) and the machine's
    idle time, read by a thread at `start` and at `end`.

    CPU time, unlike wall time, barely changes when other programs share the cores, so
    the CPU cost per step of each part (environment, runner, server) can be compared
    across phases and runs. Idle cores say whether a slow phase left the machine unused
    (a stall of ours) or had it full (our work, or another program's).
    """

    def __init__(self, start: float, end: float,
                 probe: Callable[[], tuple[float, ...]] | None = None):
        self.start, self.end = start, end
        self._marks: list[tuple[float, float, float]] = []
        self._probe = probe  # read with the clocks at both moments: `probed()`
        self._probes: list[tuple[float, ...]] = []
        self._thread = threading.Thread(target=self._watch, args=(start, end),
                                        name="cpu-window", daemon=True)
        self._thread.start()

    def _watch(self, start: float, end: float) -> None:
        for moment in (start, end):
            time.sleep(max(moment - time.monotonic(), 0.0))
            self._marks.append((time.monotonic(), time.process_time(), _machine_idle_s()))
            if self._probe is not None:
                self._probes.append(self._probe())

    def process_s(self) -> float:
        """This process's CPU seconds in the window; waits for its end."""
        self._thread.join()
        return self._marks[1][1] - self._marks[0][1]

    def probed(self) -> tuple[float, ...]:
        """How much each of the probe's counters grew in the window; waits for its end."""
        self._thread.join()
        return tuple(b - a for a, b in zip(*self._probes, strict=True))

    def idle_cores(self) -> float:
        """Cores the machine left idle, on average over the window; waits for its end."""
        self._thread.join()
        (t0, _, idle0), (t1, _, idle1) = self._marks
        return (idle1 - idle0) / (t1 - t0)


def _env_worker(seed: int, ready, windows, results) -> None:
    """Steps one environment with random actions; puts the steps taken in the window."""
    from seed_agents.envs import make_environment

    env = make_environment(ENV_ID, seed=seed)
    actions = np.random.default_rng(seed).integers(0, env.action_spec().num_values, 1 << 16)
    env.reset()
    start, end = wait_for_window(ready, windows)
    cpu = _CpuWindow(start, end)
    steps = i = 0
    while (now := time.monotonic()) < end:
        env.step(actions[i & 0xFFFF])
        i += 1
        steps += now >= start
    results.put({"steps": steps, "cpu_s": cpu.process_s()})


class _DelayedChannel:
    """A channel `delay_s` away each way, optionally through a link of `bytes_per_s`: a
    simulated network between runner and service.

    A worker thread carries each request: it waits `delay_s` plus the request's time on the
    link (its payload bytes over `bytes_per_s`), sends, waits for the actions, waits
    `delay_s` plus their time on the link, and hands them over, so the runner's thread
    never sleeps on the network (a network does not block the sender) and the server sees
    each request late, as it would. The kernel here has no `tc netem`; this is the
    harness's delay. One request is in flight per stream, so the link is never shared.
    """

    def __init__(self, channel, delay_s: float, bytes_per_s: float = 0.0):
        import queue

        self._channel = channel
        self._delay_s = delay_s
        self._s_per_byte = 1.0 / bytes_per_s if bytes_per_s > 0 else 0.0
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._replies: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._carry, daemon=True).start()

    def _carry(self) -> None:
        while (batch := self._requests.get()) is not None:
            time.sleep(self._delay_s + self._s_per_byte * _payload_bytes(batch))
            try:
                self._channel.send(batch)
                reply = self._channel.receive()
            except BaseException as error:  # noqa: BLE001 - handed to the runner's thread
                reply = error
            else:
                time.sleep(self._delay_s + self._s_per_byte * _payload_bytes(reply))
            self._replies.put(reply)

    def send(self, batch) -> None:
        self._requests.put(batch)

    def receive(self):
        reply = self._replies.get()
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def close(self) -> None:
        self._requests.put(None)


def _payload_bytes(message) -> int:
    """The bytes of a step batch's or an answer's arrays (what the wire carries, less its
    few header bytes)."""
    if isinstance(message, np.ndarray):  # an answer: the actions
        return message.nbytes
    return sum(getattr(message, field.name).nbytes  # a StepBatch
               for field in dataclasses.fields(message))


def _central_runner(address: str, k: int, seed: int, groups: int, delay_ms: float,
                    env_id: str, cpu: int | None, bandwidth_mbit: float, ready, windows,
                    results) -> None:
    """An `EnvRunner` of K `env_id` environments in `groups` groups against the service
    at `address` (each group's stream `delay_ms` away each way, through a link of
    `bandwidth_mbit` if > 0), timed by the runner's own
    figures (`EnvRunner.figures`) read at the window's start and end. With `cpu`, pinned
    first to that CPU (as `run_runner(cpu=...)` does)."""
    from seed_agents.envs import environment_factory
    from seed_agents.utils.affinity import pin_to_cpu

    if cpu is not None:
        pin_to_cpu(cpu)
    from seed_agents.inference import wire
    from seed_agents.inference.grpc_client import RemoteInference
    from seed_agents.inference.runner import EnvRunner

    runner = EnvRunner(environment_factory(env_id), k, seed, groups)
    spec = runner.envs[0].observation_spec()
    num_actions = int(runner.envs[0].action_spec().num_values)
    run_id = f"run-{seed}-{os.getpid()}"
    hellos = [wire.Hello(f"runner-{seed}/{g}", run_id, n, spec.shape, spec.dtype, num_actions)
              for g, n in enumerate(runner.group_sizes)]
    start, end = wait_for_window(ready, windows)
    cpu = _CpuWindow(start, end)
    stop = threading.Event()
    marks: dict[str, dict[str, Any]] = {}

    def read() -> dict[str, Any]:
        figures = runner.figures()
        return {"rounds": runner.rounds, "steps": figures["env_steps"],
                "trips": sum(figures["round_trip"]), **figures}

    class Timed:
        """Marks the runner's figures at the first answer in the window and at its end."""

        def __init__(self, channel):
            self.channel = channel

        def send(self, batch):
            self.channel.send(batch)

        def receive(self):
            actions = self.channel.receive()
            now = time.monotonic()
            if "start" not in marks and now >= start:
                marks["start"] = read()
            if now >= end and "end" not in marks:
                marks["end"] = read()
                stop.set()
            return actions

    remotes = [RemoteInference(address, hello) for hello in hellos]
    channels = [_DelayedChannel(r, delay_ms / 1e3, bandwidth_mbit * 1e6 / 8)
                if delay_ms > 0 or bandwidth_mbit > 0 else r for r in remotes]
    try:
        runner.run([Timed(c) for c in channels], stop)
    finally:
        for channel in channels:
            if isinstance(channel, _DelayedChannel):
                channel.close()
        for remote in remotes:
            remote.close()
        runner.close()
    first, last = marks["start"], marks["end"]
    results.put({
        **{key: last[key] - first[key]
           for key in ("rounds", "steps", "infer_s", "env_s", "trips", "round_trip_s")},
        "round_trip": [a - b for a, b in zip(last["round_trip"], first["round_trip"],
                                             strict=True)],
        "cpu_s": cpu.process_s()})


def _local_actor(config: Any, seed: int, ready, windows, results) -> None:
    """IMPALA's actor: one environment, its own policy copy, batch-1 inference per step."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)  # One process per core: each actor gets one thread.
    from builders.vtrace import VTraceBuilder
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    env = make_environment(ENV_ID, seed=seed)
    spec = make_environment_spec(env)
    builder = VTraceBuilder(config)
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=seed)
    state, prev = policy.initial_state(1), np.zeros(1, np.int32)
    timestep = env.reset()
    policy.step(timestep.observation[None], prev, state)  # Traces before the window.
    start, end = wait_for_window(ready, windows)
    cpu = _CpuWindow(start, end)
    steps = 0
    while (now := time.monotonic()) < end:
        action, _, state = policy.step(timestep.observation[None], prev, state)
        timestep = env.step(action[0])
        prev = action
        steps += now >= start
    results.put({"steps": steps, "cpu_s": cpu.process_s()})


def _run_phase(target, args_per_process: list[tuple], warmup_s: float, duration_s: float,
               probe: Callable[[], tuple[float, ...]] | None = None,
               ) -> tuple[list[dict[str, Any]], _CpuWindow]:
    """Runs `target(*args, ready, windows, results)` in spawned processes, all counting
    over the same window (`run_in_window`); returns what each puts, and this process's
    CPU and the machine's idle time over that window (and the growth of `probe`'s
    counters, if given).
    """
    cpu: list[_CpuWindow] = []
    out = run_in_window(target, args_per_process, warmup_s, duration_s,
                        on_window=lambda start, end: cpu.append(_CpuWindow(start, end, probe)),
                        ready_timeout_s=_READY_TIMEOUT_S)
    return out, cpu[0]


def json_round(value: float | None, digits: int = 0) -> float | int | None:
    """JSON-friendly: None for a phase not run (NaN is not JSON)."""
    if value is None or not np.isfinite(value):
        return None
    return round(value) if digits == 0 else round(value, digits)


def add_config_arguments(parser, default_preset: str = "atari_ppo_large") -> None:
    """`--preset` and `--set`, as the one-process learner benchmarks take them; read back
    with `training_config(args.preset, args.overrides)`."""
    parser.add_argument("--preset", default=default_preset,
                        help="the V-trace preset (seed_agents.agents.vtrace.presets)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="V-trace config field, e.g. batch_size=16")


def training_config(preset: str, overrides: list[str]):
    """The V-trace config every phase uses: the preset (`atari_cpu`, the one
    examples/atari_pong.py trains with, or `atari_ppo`, learn_pong.py's), then the user's
    `--set` (later keys win)."""
    from seed_agents.agents.vtrace.config import VTraceConfig
    from seed_agents.agents.vtrace.presets import VTRACE_PRESETS
    from seed_agents.utils.overrides import parse_overrides

    return parse_overrides(VTraceConfig, [*VTRACE_PRESETS[preset], *overrides])


# --- phases -----------------------------------------------------------------------------


def _per_step_ms(out: list[dict[str, Any]]) -> float:
    return 1e3 * sum(r["cpu_s"] for r in out) / max(sum(r["steps"] for r in out), 1)


def measure_env_limit(processes: int, warmup_s: float, duration_s: float) -> dict[str, float]:
    """Env steps/s of `processes` processes stepping Pong with random actions, summed, and
    the CPU milliseconds one step costs."""
    out, cpu = _run_phase(_env_worker, [(i,) for i in range(processes)], warmup_s,
                          duration_s)
    return {"steps_per_s": sum(r["steps"] for r in out) / duration_s,
            "cpu_ms_per_step": _per_step_ms(out), "idle_cores": cpu.idle_cores()}


class _TimedPolicy:
    """Wraps the server's policy to record each batch: when, how many envs, how long.

    The server calls `step` on its batcher thread only; a list append is safe to read
    from another thread afterwards.
    """

    def __init__(self, policy):
        self._policy = policy
        self.extras_spec = policy.extras_spec
        self.state_spec = policy.state_spec
        self.num_evaluation_envs = policy.num_evaluation_envs
        self.records: list[tuple[float, int, float]] = []  # (start, batch size, seconds)

    def initial_state(self, batch_size: int):
        return self._policy.initial_state(batch_size)

    def step(self, observation, prev_action, state, env_ids=None):
        t0 = time.monotonic()
        out = self._policy.step(observation, prev_action, state, env_ids)
        self.records.append((t0, len(observation), time.monotonic() - t0))
        return out

    def stats(self, start: float, end: float) -> dict[str, float]:
        """Mean batch, policy milliseconds per batch, and batches/s within [start, end)."""
        inside = [(n, s) for t, n, s in list(self.records) if start <= t < end]
        batches = max(len(inside), 1)
        return {
            "mean_batch": sum(n for n, _ in inside) / batches,
            "policy_ms_per_batch": 1e3 * sum(s for _, s in inside) / batches,
            "batches_per_s": len(inside) / (end - start),
            "server_policy_busy": sum(s for _, s in inside) / (end - start),
        }


def _timed_builder(config):
    """A `VTraceBuilder` whose policies are `_TimedPolicy`s, kept in `.timed_policies`:
    how the training phase sees the inference server's batches inside the backend."""
    from builders.vtrace import VTraceBuilder

    class TimedVTraceBuilder(VTraceBuilder):
        def make_policy(self, networks, env_spec, evaluation=False, seed=None, num_envs=1):
            policy = _TimedPolicy(super().make_policy(networks, env_spec, evaluation, seed,
                                                      num_envs))
            self.timed_policies.append(policy)
            return policy

    builder = TimedVTraceBuilder(config)
    builder.timed_policies = []
    return builder


def measure_acting(policy, spec, runners: int, k: int, warmup_s: float, duration_s: float,
                   max_wait_ms: float, address: str = "127.0.0.1:0", groups: int = 1,
                   delay_ms: float = 0.0, stack_on_server: bool = True,
                   pin: bool = True, bandwidth_mbit: float = 0.0) -> dict[str, float]:
    """Env steps/s of `runners` x `k` environments in `groups` groups each against the
    central server (no replay), each stream `delay_ms` away each way (through a link of
    `bandwidth_mbit` where > 0), and where each round trip's time went. With
    `stack_on_server` (as `Experiment`'s default) the runners' environments make single
    frames and the server stacks them; without, each environment stacks its own and sends
    all four. With `pin`, runner i pins itself to CPU i (`Experiment.pin_runners`)."""
    from seed_agents.envs.registry import split_frame_stack
    from seed_agents.inference.grpc_service import InferenceService
    from seed_agents.inference.server import InferenceConfig, InferenceServer
    from seed_agents.utils.counting import percentile_ms

    env_id, frame_stack = split_frame_stack(ENV_ID) if stack_on_server else (ENV_ID, 1)
    timed = _TimedPolicy(policy)
    config = InferenceConfig(max_envs=runners * k, max_batch_size=runners * k,
                             max_wait_ms=max_wait_ms, frame_stack=frame_stack)
    server = InferenceServer(timed, spec, adder=None, config=config)
    service = InferenceService(server, spec, address=address, max_streams=runners * groups)
    address = service.start()
    try:
        out, cpu = _run_phase(_central_runner,
                              [(address, k, 1000 * i, groups, delay_ms, env_id,
                                i if pin else None, bandwidth_mbit) for i in range(runners)],
                              warmup_s, duration_s,
                              probe=lambda: (service.bytes_received, service.bytes_sent))
    finally:
        service.stop()
        server.close()
    rounds = sum(r["rounds"] for r in out)
    steps = sum(r["steps"] for r in out)
    trips = sum(r["trips"] for r in out)
    histogram = {"round_trip": np.sum([r["round_trip"] for r in out], axis=0).tolist()}
    server = timed.stats(cpu.start, cpu.end)
    rtt_ms = 1e3 * sum(r["round_trip_s"] for r in out) / trips if trips else float("nan")
    received, sent = cpu.probed()
    frames = max(steps, 1) * ACTION_REPEAT
    return {
        "steps_per_s": steps / duration_s,
        # CPU per env step: each runner process (environments, encoding, its gRPC client)
        # and the server process (gRPC, decoding, batching, the policy's TF threads).
        "runner_cpu_ms_per_step": _per_step_ms(out),
        "server_cpu_ms_per_step": 1e3 * cpu.process_s() / max(steps, 1),
        "idle_cores": cpu.idle_cores(),
        **server,
        "rtt_ms": rtt_ms,
        "rtt_p99_ms": percentile_ms({}, histogram, "round_trip", 99),
        "runner_env_ms_per_round": 1e3 * sum(r["env_s"] for r in out) / max(rounds, 1),
        "runner_waiting": sum(r["infer_s"] for r in out) / (runners * duration_s),
        # What a round trip costs beyond the policy call: transport, decoding, waiting for
        # a batch to close, the server's bookkeeping.
        "rtt_beyond_policy_ms": rtt_ms - server["policy_ms_per_batch"],
        # Payload bytes per emulator frame on the wire (gRPC's and TCP's headers not
        # counted): runners to the service (observations, rewards, step types) and back
        # (actions). Counted by the service over the same window.
        "bytes_per_frame_up": received / frames,
        "bytes_per_frame_down": sent / frames,
    }


def measure_inference_limit(policy, batch: int, warmup_s: float,
                            duration_s: float) -> dict[str, float]:
    """Obs/s of the policy's step on [batch, 84, 84, 4] uint8 frames, called in a loop, and
    the CPU milliseconds per observation."""
    rng = np.random.default_rng(0)
    observation = rng.integers(0, 256, (batch, 84, 84, 4), dtype=np.uint8)
    prev_action = np.zeros(batch, np.int32)
    state = policy.initial_state(batch)
    start = time.monotonic() + warmup_s
    end = start + duration_s
    cpu = _CpuWindow(start, end)
    calls = 0
    while (now := time.monotonic()) < end:
        policy.step(observation, prev_action, state)
        calls += now >= start
    return {"obs_per_s": calls * batch / duration_s,
            "cpu_ms_per_obs": 1e3 * cpu.process_s() / max(calls * batch, 1),
            "idle_cores": cpu.idle_cores()}


def random_unroll_learner(config, spec, policy):
    """A V-trace learner whose dataset gives one batch of random unrolls (uint8 frames,
    zeros elsewhere) forever: its train step's cost without a replay or runners."""
    import collections

    import tensorflow as tf
    import tree

    from builders.vtrace import VTraceBuilder
    from seed_agents.agents.vtrace.learning import VTraceLearner
    from seed_agents.replay import unroll_signature

    signature = unroll_signature(spec, config.unroll_length, policy.extras_spec,
                                 policy.state_spec)
    rng = np.random.default_rng(0)

    def random_field(s: tf.TensorSpec) -> np.ndarray:
        shape = (config.batch_size, *s.shape)
        if s.dtype == tf.uint8:
            return rng.integers(0, 256, shape, dtype=np.uint8)
        return np.zeros(shape, s.dtype.as_numpy_dtype)

    sample = collections.namedtuple("Sample", "data")(tree.map_structure(random_field,
                                                                         signature))
    dataset = tf.data.Dataset.from_tensors(sample).repeat()
    return VTraceLearner(VTraceBuilder(config).make_networks(spec), dataset, config)


def measure_learner_limit(config, spec, policy, warmup_s: float,
                          duration_s: float) -> dict[str, float]:
    """Env steps/s the V-trace learner alone can consume: its train step on one batch of
    random unrolls, over and over, with this process's TF threads (as in training).

    Counted as `batch_size * unroll_length` env steps per learner step (each unroll's
    extra bootstrap row is work, not new experience).
    """
    learner = random_unroll_learner(config, spec, policy)
    learner.step()  # Traces.
    start = time.monotonic() + warmup_s
    end = start + duration_s
    cpu = _CpuWindow(start, end)
    # A learner step takes a good fraction of a second: timed from the first step begun
    # in the window to the last one finished, not counted in whole steps per window.
    began = finished = None
    steps = 0
    while (t0 := time.monotonic()) < end:
        learner.step()
        if t0 >= start:
            began, finished, steps = began or t0, time.monotonic(), steps + 1
    rate = steps * config.batch_size * config.unroll_length / max(
        (finished or 1.0) - (began or 0.0), 1e-9)
    return {"steps_per_s": rate,
            "cpu_ms_per_step": 1e3 * cpu.process_s() / max(rate * duration_s, 1.0),
            "idle_cores": cpu.idle_cores()}


def learner_flops_per_step(config, spec) -> dict[str, float]:
    """The V-trace learner's arithmetic per env step, counted from its network's shapes
    (`seed_agents.utils.flops.float_operations`), not timed.

    One gradient of the network (forward and backward, both heads) is counted on a batch
    of 8 observations and divided by 8; a learner step makes `sgd_steps_per_batch` passes
    over `batch_size` unrolls of `unroll_length + 1` rows (the extra row bootstraps), and
    under value normalization one more forward pass. V-trace's own arithmetic and Adam's
    (element-wise, a few per weight or per row) are left out: under 1% of a convolutional
    network's.
    """
    import tensorflow as tf

    from builders.vtrace import VTraceBuilder
    from seed_agents.utils.flops import float_operations

    network = VTraceBuilder(config).make_networks(spec)
    batch = 8
    state = network.initial_state(batch)
    observation = tf.TensorSpec([1, batch, *spec.observations.shape], spec.observations.dtype)
    prev_action = tf.TensorSpec([1, batch], tf.int32)
    first = tf.TensorSpec([1, batch], tf.bool)

    def forward(o, a, f):
        logits, value, _ = network.unroll_with_features(o, a, f, state)
        return logits, value

    def gradient(o, a, f):
        with tf.GradientTape() as tape:
            logits, value = forward(o, a, f)
            loss = tf.reduce_sum(tf.cast(logits, tf.float32)) + tf.reduce_sum(
                tf.cast(value, tf.float32))
        # The loss too: a graph is counted as pruned to its outputs, and training computes
        # the forward pass whether or not a gradient needs it.
        return loss, tape.gradient(loss, network.trainable_variables)

    specs = (observation, prev_action, first)
    forward_flops = float_operations(forward, specs) / batch
    gradient_flops = float_operations(gradient, specs) / batch
    rows = (config.unroll_length + 1) / config.unroll_length
    passes = config.sgd_steps_per_batch * gradient_flops + (
        forward_flops if config.value_normalization is not None else 0.0)
    return {"forward_flops_per_obs": forward_flops,
            "gradient_flops_per_sample": gradient_flops,
            "learner_flops_per_step": rows * passes}


def measure_matmul_peak(precision: str, duration_s: float) -> dict[str, float]:
    """GFLOP/s of a large matmul (`seed_agents.utils.flops.matmul_gflops`, 4096 square)
    in float32 and, where it is the learner's, in bfloat16, with this process's TF threads
    (as the learner has them)."""
    import tensorflow as tf

    from seed_agents.utils.flops import matmul_gflops

    out = {"float32": matmul_gflops(tf.float32, 4096, duration_s)}
    if precision == "bfloat16":
        out["bfloat16"] = matmul_gflops(tf.bfloat16, 4096, duration_s)
    return out


def measure_impala_style(config, actors: int, warmup_s: float,
                         duration_s: float) -> dict[str, float]:
    """Env steps/s of `actors` IMPALA-style actor processes, summed, and CPU per step."""
    out, cpu = _run_phase(_local_actor, [(config, 1000 * i) for i in range(actors)],
                          warmup_s, duration_s)
    return {"steps_per_s": sum(r["steps"] for r in out) / duration_s,
            "cpu_ms_per_step": _per_step_ms(out), "idle_cores": cpu.idle_cores()}


def _children_cpu_s() -> tuple[int, float]:
    """How many child processes of this one are alive, and the CPU seconds they have used
    so far (Linux /proc; a child that cannot be read is not counted)."""
    ticks = os.sysconf("SC_CLK_TCK")
    count, total = 0, 0.0
    try:
        children = multiprocessing.active_children()
    except RuntimeError:  # The set of children changed while it was read.
        return 0, float("nan")
    for child in children:
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            count += 1
        except (OSError, IndexError, ValueError):
            pass
    return count, total


def _last_progress(path: Path) -> tuple[float, float] | None:
    """(env_steps, learner_steps) of the last complete row of a progress CSV, if any."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 2:
        return None
    header, last = next(csv.reader(lines[:1])), next(csv.reader(lines[-1:]))
    if len(last) != len(header):  # A row caught half-written.
        return None
    row = dict(zip(header, last, strict=True))
    return float(row["env_steps"]), float(row["learner_steps"])


class _TrainingProbe(threading.Thread):
    """Samples a running training's progress and CPU use on this process's clock.

    The backend offers no hook into its loop, but it flushes its progress log every row,
    so every `period_s` this reads the log's last row and the CPU time of this process
    (learner, inference server, Reverb) and of its children (the runner processes).
    """

    def __init__(self, progress_csv: Path, window_s: float, period_s: float = 0.5):
        super().__init__(daemon=True, name="training-probe")
        self._path = progress_csv
        self._window_s = window_s
        self._period_s = period_s
        self._done = threading.Event()
        # Set once `window_s` seconds have passed since the first learner step: the run
        # has then given its window, however long starting it took on this machine.
        self.enough = threading.Event()
        # (time, env steps, learner steps, own CPU s, live children, children's CPU s,
        #  machine idle s)
        self.samples: list[tuple[float, float, float, float, int, float, float]] = []

    def run(self) -> None:
        while not self._done.wait(self._period_s):
            progress = _last_progress(self._path)
            if progress is not None:
                self.samples.append((time.monotonic(), *progress, time.process_time(),
                                     *_children_cpu_s(), _machine_idle_s()))
                if time.monotonic() >= self._began() + self._window_s:
                    self.enough.set()

    def _began(self) -> float:
        """When the learner's first step was seen (training proper), or +inf."""
        return next((s[0] for s in self.samples if s[2] > 0), float("inf"))

    def window(self, warmup_s: float, children: int) -> list[tuple]:
        """The samples from `warmup_s` after the first learner step until progress
        stopped, while all `children` runner processes were alive (none dying or
        restarting)."""
        began = self._began()
        final = max((s[1] for s in self.samples), default=0.0)
        window = []
        for sample in self.samples:
            if sample[0] >= began + warmup_s and sample[4] == children:
                window.append(sample)
                if sample[1] >= final:  # The run has stopped: what follows is shutdown.
                    break
        return window

    def finish(self) -> None:
        self._done.set()
        self.join()


def measure_training(config, runners: int, k: int, warmup_s: float, duration_s: float,
                     max_wait_ms: float, startup_s: float,
                     address: str = "127.0.0.1:0", groups: int = 1) -> dict[str, float]:
    """Env steps/s and learner samples/s of V-trace training under the in-process backend
    with gRPC runner processes, and the CPU it costs per env step.

    The window opens `warmup_s` after the learner's first step (spawning runners and
    tracing the learner take what they take on this machine) and the run is stopped
    `duration_s` later; `startup_s` only bounds how long the first step may take.
    """
    from launch.backends.inprocess import run_inprocess
    from launch.experiment import Experiment

    # All environments start together and unrolls have a fixed length, so they complete in
    # bursts of one per environment; a queue that cannot take a whole burst blocks the
    # server's adder, and with it all acting, until the learner has taken a few batches.
    config = dataclasses.replace(
        config, queue_size=max(config.queue_size, runners * k + 2 * config.batch_size))
    builder = _timed_builder(config)
    with tempfile.TemporaryDirectory() as logdir:
        experiment = Experiment(
            builder=builder, environment=ENV_ID, num_runners=runners,
            envs_per_runner=k, runner_groups=groups, max_env_steps=10**9, transport="grpc",
            inference_address=address, inference_max_wait_ms=max_wait_ms,
            max_wall_s=startup_s + warmup_s + duration_s, logdir=logdir, log_every_s=0.5,
            evaluate_every_s=None, checkpoint_every_s=None,
        )
        probe = _TrainingProbe(Path(logdir) / "train.csv", warmup_s + duration_s)
        probe.start()
        try:
            with open(os.devnull, "w") as quiet:
                result = run_inprocess(experiment, stream=quiet, stop=probe.enough)
        finally:
            probe.finish()
    window = probe.window(warmup_s, runners)
    if len(window) < 2:
        return {"trained_steps_per_s": float("nan"), "env_steps_per_s": float("nan"),
                "learner_steps": result.learner_steps}
    (t0, env0, learn0, own0, _, kids0, idle0), (t1, env1, learn1, own1, _, kids1, idle1) = (
        window[0], window[-1])
    seconds, steps = t1 - t0, max(env1 - env0, 1.0)
    # Each env step is trained on exactly once (a FIFO queue), so the rate of training is
    # the learner's samples/s: env steps/s only equals it once the queue is full, and
    # while it fills (~3K steps here) acting runs ahead of learning.
    trained = (learn1 - learn0) * config.batch_size * config.unroll_length
    return {
        "trained_steps_per_s": trained / seconds,
        "cpu_ms_per_trained_step": 1e3 * (own1 - own0 + kids1 - kids0) / max(trained, 1.0),
        "env_steps_per_s": (env1 - env0) / seconds,
        "learner_samples_per_s": trained / seconds,
        "learner_steps_per_s": (learn1 - learn0) / seconds,
        "server_and_learner_cpu_ms_per_step": 1e3 * (own1 - own0) / steps,
        "runner_cpu_ms_per_step": 1e3 * (kids1 - kids0) / steps,
        "cpu_cores_busy": (own1 - own0 + kids1 - kids0) / seconds,
        "idle_cores": (idle1 - idle0) / seconds,
        **builder.timed_policies[0].stats(t0, t1),
        "window_s": seconds,
        "learner_steps": result.learner_steps,
    }


# --- driver -----------------------------------------------------------------------------
