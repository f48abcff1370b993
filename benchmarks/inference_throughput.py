"""Central batched inference over gRPC against IMPALA-style per-actor inference.

    python benchmarks/inference_throughput.py

Measures, in one run on the same cores:
  * central MLP: R runner processes x K synthetic environments (near-zero step cost,
    float32[4] observations) streaming to one inference service that runs an MLP policy;
  * central CNN: the same with 84x84x4 uint8 observations and the Nature-DQN CNN;
  * baseline: R actor processes, each with its own copy of the CNN policy, one environment
    each, batch-1 inference every step (IMPALA's actors).
Observations/s are counted inside a common measurement window: every process reports
ready (runners once their first round trip is answered, actors once their policy has
stepped), and only then does the window start, after a warm-up, whatever the machine's
load made start-up cost. Round-trip latencies are timed by the runners. The inference
server runs without replay here: this measures transport, batching and policy, not
Reverb. Prints one JSON line last; a baseline of 0 is an error, not a ratio.

Top-level imports stay light: spawned runner processes re-import this module, and they
must not load TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

from seed_agents.utils.phases import run_in_window, wait_for_window

MLP_ENV = "fake:obs=4,actions=2,len=200"
CNN_ENV = "fake:obs=84x84x4,dtype=uint8,actions=6,len=200"
_TOKEN = "inference-throughput"  # the service checks it, as every launcher's does


def _central_runner(address, env_id, k, seed, ready, windows, results):
    from seed_agents.envs import environment_factory
    from seed_agents.inference import wire
    from seed_agents.inference.grpc_client import RemoteInference
    from seed_agents.inference.runner import EnvRunner

    runner = EnvRunner(environment_factory(env_id), k, seed)
    env = runner.envs[0]
    hello = wire.hello_from_specs(f"bench-{seed}", f"run-{seed}-{os.getpid()}", k,
                                  env.observation_spec(), env.action_spec())
    window: tuple[float, float] | None = None
    steps, latencies = 0, []
    stop = threading.Event()
    with RemoteInference(address, hello, auth_token=_TOKEN) as remote:
        def timed(batch):
            nonlocal window, steps
            t0 = time.monotonic()
            actions = remote(batch)
            t1 = time.monotonic()
            if window is None:  # served once: admitted and traced, so ready
                window = wait_for_window(ready, windows)
            elif window[0] <= t0 and t1 < window[1]:
                steps += k
                latencies.append(t1 - t0)
            elif t1 >= window[1]:
                stop.set()
            return actions

        runner.run(timed, stop)
    results.put((steps, latencies))


def _local_actor(env_id, torso, hidden, seed, ready, windows, results):
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(1, 1)
    from seed_agents.agents.vtrace.acting import VTracePolicy
    from seed_agents.agents.vtrace.networks import PolicyValueNetwork
    from seed_agents.envs import make_environment
    from seed_agents.specs import make_environment_spec

    env = make_environment(env_id, seed=seed)
    spec = make_environment_spec(env)
    policy = VTracePolicy(PolicyValueNetwork(spec.num_actions, spec.observations.shape,
                                             hidden, torso=torso), spec, seed=seed)
    state, prev = policy.initial_state(1), np.zeros(1, np.int32)
    timestep = env.reset()
    policy.step(timestep.observation[None], prev, state)  # traced before the window
    start, end = wait_for_window(ready, windows)
    steps = 0
    while True:
        action, _, state = policy.step(timestep.observation[None], prev, state)
        timestep = env.step(action[0])
        prev = action
        now = time.monotonic()
        if now >= end:
            break
        if now >= start:
            steps += 1
    results.put((steps, []))


def measure_central(env_id, torso, hidden, runners, k, warmup_s, duration_s, max_wait_ms,
                    address="127.0.0.1:0"):
    from seed_agents.agents.vtrace.acting import VTracePolicy
    from seed_agents.agents.vtrace.networks import PolicyValueNetwork
    from seed_agents.envs import make_environment
    from seed_agents.inference.grpc_service import InferenceService
    from seed_agents.inference.server import InferenceConfig, InferenceServer
    from seed_agents.specs import make_environment_spec
    from seed_agents.utils.gc_tuning import gc_for_serving

    spec = make_environment_spec(make_environment(env_id))
    network = PolicyValueNetwork(spec.num_actions, spec.observations.shape, hidden, torso=torso)
    policy = VTracePolicy(network, spec, seed=0)
    config = InferenceConfig(max_envs=runners * k, max_batch_size=runners * k,
                             max_wait_ms=max_wait_ms)
    server = InferenceServer(policy, spec, adder=None, config=config)
    service = InferenceService(server, spec, address=address, max_streams=runners,
                               auth_token=_TOKEN)
    with gc_for_serving():  # as the launchers do in the learner's process
        address = service.start()
        try:
            out = run_in_window(_central_runner, [(address, env_id, k, i)
                                                  for i in range(runners)],
                                warmup_s, duration_s)
        finally:
            service.stop()
            server.close()
    latencies = np.concatenate([np.asarray(lat) for _, lat in out]) * 1000.0
    batcher = server.batcher
    return {
        "obs_per_s": sum(s for s, _ in out) / duration_s,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "mean_batch": batcher.items / max(batcher.batches, 1),
    }


def measure_local(env_id, torso, hidden, actors, warmup_s, duration_s):
    out = run_in_window(_local_actor, [(env_id, torso, hidden, i) for i in range(actors)],
                        warmup_s, duration_s)
    return {"obs_per_s": sum(s for s, _ in out) / duration_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=4, help="runner (and actor) processes")
    parser.add_argument("--mlp-envs", type=int, default=64, help="K per runner, MLP")
    parser.add_argument("--cnn-envs", type=int, default=32, help="K per runner, CNN")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--address", default="127.0.0.1:0",
                        help="service address: host:port, or unix:/path for a Unix socket")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(2, 1)
    mlp = measure_central(MLP_ENV, "mlp", (64, 64), args.runners, args.mlp_envs,
                          args.warmup_s, args.duration_s, args.max_wait_ms, args.address)
    print(f"central MLP: {mlp}", flush=True)
    cnn = measure_central(CNN_ENV, "nature_cnn", (512,), args.runners, args.cnn_envs,
                          args.warmup_s, args.duration_s, args.max_wait_ms, args.address)
    print(f"central CNN: {cnn}", flush=True)
    local = measure_local(CNN_ENV, "nature_cnn", (512,), args.runners, args.warmup_s,
                          args.duration_s)
    print(f"IMPALA-style local CNN: {local}", flush=True)
    if local["obs_per_s"] <= 0:
        sys.exit("inference_throughput: the IMPALA-style baseline measured 0 obs/s in its "
                 "window; there is no ratio to report")
    from seed_agents.utils.reference import machine_report

    print(json.dumps({
        "bench": "inference_throughput",
        "value": round(mlp["obs_per_s"]),
        "unit": "obs/s",
        "cnn_value": round(cnn["obs_per_s"]),
        "baseline": round(local["obs_per_s"]),
        "ratio": round(cnn["obs_per_s"] / local["obs_per_s"], 2),
        "p50_ms": round(mlp["p50_ms"], 3),
        "p99_ms": round(mlp["p99_ms"], 3),
        "cnn_p50_ms": round(cnn["p50_ms"], 3),
        "cnn_p99_ms": round(cnn["p99_ms"], 3),
        "mlp_mean_batch": round(mlp["mean_batch"], 1),
        "cnn_mean_batch": round(cnn["mean_batch"], 1),
        # Where it ran: CPU, flags, TF, precision and one-second reference rates.
        "machine": machine_report("float32"),
        "config": {"runners": args.runners, "mlp_envs_per_runner": args.mlp_envs,
                   "cnn_envs_per_runner": args.cnn_envs, "duration_s": args.duration_s,
                   "max_wait_ms": args.max_wait_ms, "address": args.address},
    }))


if __name__ == "__main__":
    main()
