"""The inference service from 8 to 1,024 runner streams: throughput, latency, admission.

    python benchmarks/runner_scale.py [--streams 8,64,256,1024] [--duration-s 10]

One inference service (the one every launcher runs: asyncio gRPC, a bearer token, the
MLP V-trace policy on `fake:obs=4,actions=2`, no replay) in this process; a few client
processes open the streams, each its own TCP connection (as separate runner processes
would), speaking the wire protocol from asyncio clients: HELLO, one all-FIRST batch,
then MID batches of K=4 pre-encoded float32[4] observations, one in flight per stream.
Clients do no environment work, so the figures are the service's.

Per row (S streams of K environments), measured after two barriers: every client
process reports ready (spawned, imports done), then all open their streams at once;
once every process reports each of its streams answered once (or failed), a common
measurement window starts after a short warm-up. A row reports obs/s in the window,
p50/p99 round trip, the seconds from the opening until the last stream got its first
answer, streams served, errors by status, and the server process's threads and RSS.

Rows: 8, 64, 256, 1,024 and 2,048 streams of K=4, and `few_large`: 4 streams of K=64 (what
`inference_throughput.py` measures). Prints one JSON line last: value = obs/s at 1,024
streams, baseline = obs/s at 64 streams, ratio = value / baseline (throughput holds as
streams grow), `value_vs_few_large` = value / few_large. A baseline of 0 is an error.
Measures, never asserts.

Top-level imports stay light: spawned client processes re-import this module and must
not load TensorFlow.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import sys
import time
from typing import Any

import numpy as np

ENV_ID = "fake:obs=4,actions=2,len=200"
_READY_TIMEOUT_S = 300.0  # spawning and importing, on a loaded machine
_ADMIT_TIMEOUT_S = 120.0


# --- client processes -------------------------------------------------------------------


def _messages(k: int, seed: int) -> tuple[bytes, bytes]:
    """(first, mid) STEP_BATCH messages of K float32[4] observations."""
    from seed_agents.inference import wire
    from seed_agents.inference.protocol import FIRST, MID, StepBatch

    obs = np.random.default_rng(seed).uniform(-1, 1, (k, 4)).astype(np.float32)

    def batch(step_type):
        return wire.encode_step_batch(StepBatch(obs, np.zeros(k, np.float32),
                                                np.ones(k, np.float32),
                                                np.full(k, step_type, np.uint8)))

    return batch(FIRST), batch(MID)


class _StreamResult:
    __slots__ = ("first_reply", "replies", "latencies", "error")

    def __init__(self):
        self.first_reply: float | None = None
        self.replies = 0
        self.latencies: list[float] = []
        self.error: str | None = None


async def _one_stream(address: str, token: str, hello: bytes, first: bytes, mid: bytes,
                      result: _StreamResult, admitted: asyncio.Event, window: list[float],
                      stop: asyncio.Event) -> None:
    import grpc

    from seed_agents.inference.grpc_client import STREAM_METHOD, bearer

    # A channel of its own, on a connection of its own (no shared subchannel pool).
    async with grpc.aio.insecure_channel(
            address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        call = channel.stream_stream(STREAM_METHOD)(
            metadata=(("authorization", bearer(token)),))
        try:
            await call.write(hello)
            await call.write(first)
            reply = await call.read()
            if reply is grpc.aio.EOF:
                result.error = (await call.code()).name
                return
            result.first_reply = time.monotonic()
            admitted.set()
            while not stop.is_set():
                t0 = time.monotonic()
                await call.write(mid)
                reply = await call.read()
                t1 = time.monotonic()
                if reply is grpc.aio.EOF:
                    result.error = (await call.code()).name
                    return
                if window and window[0] <= t0 and t1 < window[1]:
                    result.replies += 1
                    result.latencies.append(t1 - t0)
            await call.done_writing()
        except grpc.aio.AioRpcError as error:
            result.error = error.code().name
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            admitted.set()  # answered or failed: either way this stream is settled


async def _client_main(address: str, token: str, k: int, streams: int, first_id: int,
                       ready, go, admitted_q, windows, results) -> None:
    from seed_agents.inference import wire

    loop = asyncio.get_running_loop()
    first, mid = _messages(k, first_id)
    hellos = [wire.encode_hello(wire.Hello(f"scale-{first_id + i}", f"run-{os.getpid()}", k,
                                           (4,), np.float32, 2)) for i in range(streams)]
    ready.put(os.getpid())
    opened_at = await loop.run_in_executor(None, go.get)
    results_by_stream = [_StreamResult() for _ in range(streams)]
    settled = [asyncio.Event() for _ in range(streams)]
    window: list[float] = []
    stop = asyncio.Event()
    tasks = [loop.create_task(_one_stream(address, token, hellos[i], first, mid,
                                          results_by_stream[i], settled[i], window, stop))
             for i in range(streams)]
    await asyncio.gather(*(event.wait() for event in settled))
    admitted_q.put(os.getpid())
    window.extend(await loop.run_in_executor(None, windows.get))
    await asyncio.sleep(max(window[0] - time.monotonic(), 0.0))
    cpu_start = time.process_time()
    await asyncio.sleep(max(window[1] - time.monotonic(), 0.0))
    cpu_s = time.process_time() - cpu_start
    stop.set()
    done, pending = await asyncio.wait(tasks, timeout=10.0)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    firsts = [r.first_reply - opened_at for r in results_by_stream if r.first_reply]
    errors = collections.Counter(r.error for r in results_by_stream if r.error)
    results.put({
        "replies": sum(r.replies for r in results_by_stream),
        "latencies": [x for r in results_by_stream for x in r.latencies],
        "served": len(firsts),
        "admit_s": max(firsts) if firsts else float("nan"),
        "firsts": firsts,
        "errors": dict(errors),
        "cpu_s": cpu_s,
    })


def _client_process(address, token, k, streams, first_id, ready, go, admitted, windows,
                    results) -> None:
    from seed_agents.utils.event_loops import new_event_loop
    from seed_agents.utils.gc_tuning import gc_for_serving

    # A message pump too: the load it adds is not the service's. On the service's kind of
    # loop (uvloop's where installed), which costs less per message than asyncio's.
    with gc_for_serving(), asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(_client_main(address, token, k, streams, first_id, ready, go, admitted,
                                windows, results))


# --- the server side --------------------------------------------------------------------


def _proc_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def _make_server(max_envs: int, max_wait_ms: float):
    from seed_agents.agents.vtrace.acting import VTracePolicy
    from seed_agents.agents.vtrace.networks import PolicyValueNetwork
    from seed_agents.envs import make_environment
    from seed_agents.inference.server import InferenceConfig, InferenceServer
    from seed_agents.specs import make_environment_spec

    spec = make_environment_spec(make_environment(ENV_ID))
    network = PolicyValueNetwork(spec.num_actions, spec.observations.shape, (64, 64),
                                 torso="mlp")
    policy = VTracePolicy(network, spec, seed=0)
    config = InferenceConfig(max_envs=max_envs, max_batch_size=max_envs,
                             max_wait_ms=max_wait_ms)
    return InferenceServer(policy, spec, adder=None, config=config), spec


def measure_row(streams: int, k: int, processes: int, warmup_s: float, duration_s: float,
                max_wait_ms: float, accept_loops: int | None = None) -> dict[str, Any]:
    from seed_agents.inference.grpc_service import InferenceService
    from seed_agents.inference.security import make_token
    from seed_agents.utils.gc_tuning import gc_for_serving

    server, spec = _make_server(streams * k, max_wait_ms)
    token = make_token()
    service = InferenceService(server, spec, max_streams=streams, auth_token=token,
                               **({"accept_loops": accept_loops} if accept_loops else {}))
    with gc_for_serving():  # as the launchers do in the learner's process
        address = service.start()
        processes = min(processes, streams)
        share = [streams // processes + (i < streams % processes) for i in range(processes)]
        context = multiprocessing.get_context("spawn")
        ready, go, admitted, windows, results = (context.Queue() for _ in range(5))
        procs = [context.Process(
            target=_client_process,
            args=(address, token, k, share[i], sum(share[:i]), ready, go, admitted, windows,
                  results), daemon=True) for i in range(processes)]
        try:
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=_READY_TIMEOUT_S)
            opened_at = time.monotonic()
            for _ in procs:
                go.put(opened_at)
            for _ in procs:
                admitted.get(timeout=_ADMIT_TIMEOUT_S)
            start = time.monotonic() + warmup_s
            end = start + duration_s
            for _ in procs:
                windows.put((start, end))
            time.sleep(max(start - time.monotonic(), 0.0))
            cpu_start = time.process_time()
            time.sleep(max(end - time.monotonic(), 0.0))
            server_cpu_s = time.process_time() - cpu_start
            threads, rss_kib = len(os.listdir("/proc/self/task")), _proc_status("VmRSS")
            out = [results.get(timeout=60.0) for _ in procs]
            for p in procs:
                p.join(10.0)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(5.0)
            service.stop(grace_s=0.5)
            server.close()
    latencies = np.concatenate([np.asarray(r["latencies"]) for r in out]) * 1e3
    firsts = np.concatenate([np.asarray(r["firsts"]) for r in out])
    errors: collections.Counter = collections.Counter()
    for r in out:
        errors.update(r["errors"])
    replies = sum(r["replies"] for r in out)
    batcher = server.batcher
    return {
        "streams": streams,
        "k": k,
        "obs_per_s": round(replies * k / duration_s),
        "p50_ms": round(float(np.percentile(latencies, 50)), 2) if latencies.size else None,
        "p99_ms": round(float(np.percentile(latencies, 99)), 2) if latencies.size else None,
        "admit_s": round(max(r["admit_s"] for r in out), 3),
        "admit_p50_s": round(float(np.median(firsts)), 3) if firsts.size else None,
        "served": sum(r["served"] for r in out),
        "errors": dict(errors),
        "server_threads": threads,
        "server_rss_mib": round(rss_kib / 1024, 1),
        "mean_batch": round(batcher.items / max(batcher.batches, 1), 1),
        "client_processes": processes,
        # CPU per round trip in the window: where the time goes, and what the machine's
        # other load cannot change much (unlike wall-clock rates).
        "server_cpu_us_per_msg": round(1e6 * server_cpu_s / max(replies, 1), 1),
        "client_cpu_us_per_msg": round(1e6 * sum(r["cpu_s"] for r in out) / max(replies, 1), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="8,64,256,1024,2048",
                        help="stream counts of K=4 rows (64 and 1024 make the JSON line)")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--accept-loops", type=int, default=None,
                        help="gRPC servers sharing the service's port (default: the "
                             "service's own)")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from seed_agents.utils.tf_threads import configure_tf_threads

    configure_tf_threads(2, 1)
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        rows.append(measure_row(streams, 4, args.processes, args.warmup_s, args.duration_s,
                                args.max_wait_ms, args.accept_loops))
        print(json.dumps(rows[-1]), flush=True)
    few_large = measure_row(4, 64, args.processes, args.warmup_s, args.duration_s,
                            args.max_wait_ms, args.accept_loops)
    print(f"few_large: {json.dumps(few_large)}", flush=True)
    by_streams = {row["streams"]: row for row in rows}
    value_row, baseline_row = by_streams.get(1024), by_streams.get(64)
    if value_row is None or baseline_row is None:
        sys.exit("runner_scale: the JSON line needs the 64 and 1024 stream rows")
    value, baseline = value_row["obs_per_s"], baseline_row["obs_per_s"]
    if baseline <= 0 or few_large["obs_per_s"] <= 0:
        sys.exit(f"runner_scale: a baseline measured 0 obs/s (64 streams: {baseline}, "
                 f"few_large: {few_large['obs_per_s']}); nothing to compare with")
    from seed_agents.utils.reference import machine_report

    print(json.dumps({
        "bench": "runner_scale",
        "value": value,
        "unit": "obs/s",
        "baseline": baseline,
        "ratio": round(value / baseline, 3),
        "admitted_1024": value_row["served"],
        "admit_s_1024": value_row["admit_s"],
        # The admission bar: every one of 2,048 streams answered once, none failed.
        **({"admitted_2048": by_streams[2048]["served"],
            "admit_s_2048": by_streams[2048]["admit_s"],
            "errors_2048": by_streams[2048]["errors"],
            "obs_per_s_2048": by_streams[2048]["obs_per_s"]} if 2048 in by_streams else {}),
        "few_large": few_large["obs_per_s"],
        "value_vs_few_large": round(value / few_large["obs_per_s"], 3),
        "rows": [*rows, {"few_large": True, **few_large}],
        "machine": machine_report("float32"),
        "config": {"processes": args.processes, "accept_loops": args.accept_loops,
                   "warmup_s": args.warmup_s,
                   "duration_s": args.duration_s, "max_wait_ms": args.max_wait_ms},
    }))


if __name__ == "__main__":
    main()
