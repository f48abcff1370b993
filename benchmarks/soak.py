"""An hour without drift: a local_mp run (V-trace or R2D2) watched for leaks and slowdowns.

    python benchmarks/soak.py [--agent vtrace|r2d2] [--minutes 60] [--sample-s 30]
                              [--kill-every-s 300]

Runs `--agent` (V-trace, a FIFO queue; or R2D2, a prioritized table whose priorities the
learner rewrites every step) on `--environment` (default CartPole, cheap to step) as
local processes for `--minutes`, SIGKILLs a runner every `--kill-every-s` (alternating
between them; the supervisor restarts it, as a preempted runner would come back), and
every `--sample-s` reads from /proc the resident memory, open file descriptors and
threads of the learner process (learner and central inference server) and of the replay
process (the Reverb server), the env and learner steps from the run's train.csv, and the
runners' own milliseconds per env step (their CSVs: the machine's speed, which the
learner does not change).

The last line is one JSON object with the slope per hour of each reading, fitted by
least squares over the samples after `--warmup-s` (`learner_rss_mib_per_h`,
`server_rss_mib_per_h` for the Reverb server's process, `learner_anon_mib_per_h` and
`learner_file_mib_per_h` for its anonymous and file-backed parts, `learner_threads_per_h`,
`learner_fds_per_h`, ...), the mappings whose resident memory changed most between the
first steady sample and the last (`learner_rss_mib_change_by_mapping`), and `ratio`: env
steps/s over the last third of the run after warm-up (`value`) against the first third
(`baseline`), with
`ratio_at_equal_env_cost`: the same corrected by the runners' env-stepping cost in those
thirds, for a host whose speed drifts. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WATCHED = {"learner": "learner", "server": "replay"}  # the JSON's name -> the node's


def vtrace_builder() -> Any:
    from builders.vtrace import VTraceBuilder
    from seed_agents.agents.vtrace.config import VTraceConfig

    return VTraceBuilder(VTraceConfig(unroll_length=20, batch_size=16, queue_size=64))


def r2d2_builder() -> Any:
    """R2D2's defaults: the table fills (5,000 sequences) within minutes, after which
    every insert evicts and every learner step rewrites 32 priorities."""
    from builders.r2d2 import R2D2Builder
    from seed_agents.agents.r2d2.config import R2D2Config

    return R2D2Builder(R2D2Config())


AGENTS = {"vtrace": vtrace_builder, "r2d2": r2d2_builder}


def proc_readings(pid: int) -> dict[str, float] | None:
    """RSS (MiB), threads and open file descriptors of `pid`; None once it is gone.

    The RSS is also split into anonymous pages (the heaps: what a leak grows) and
    file-backed ones (shared libraries' code and data, paged in as code paths first run:
    bounded by the libraries' size, and the kernel may drop them)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    readings = {"rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
                "threads": int(fields["Threads"]), "fds": fds}
    for field, name in (("RssAnon", "anon_mib"), ("RssFile", "file_mib")):
        if field in fields:  # Linux >= 4.5
            readings[name] = int(fields[field].split()[0]) / 1024
    return readings


def rss_by_mapping(pid: int) -> dict[str, float]:
    """`pid`'s resident MiB per kind of mapping (/proc's smaps): each file by its name,
    `[heap]` (glibc's main arena), `[stack]`, and `anon` (mmapped memory: glibc's other
    arenas and large blocks, Python's object arenas, thread stacks). Compared between
    the first steady sample and the last, it says which of them grew."""
    totals: Counter[str] = Counter()
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return {}
    name = "anon"
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            # A mapping's header: address range, perms, offset, device, inode[, path].
            name = os.path.basename(head[5].strip()) if len(head) == 6 else "anon"
            name = name or "anon"
        elif line.startswith("Rss:"):
            totals[name] += int(line.split()[1]) / 1024
    return dict(totals)


def growth_by_mapping(first: dict[str, float], last: dict[str, float],
                      top: int = 6) -> dict[str, float]:
    """The `top` mappings whose resident MiB changed most between two `rss_by_mapping`."""
    changes = {name: last.get(name, 0.0) - first.get(name, 0.0) for name in first | last}
    largest = sorted(changes.items(), key=lambda item: -abs(item[1]))[:top]
    return {name: round(change, 2) for name, change in largest if round(change, 2)}


def thread_names(pid: int) -> Counter[str]:
    """How many of `pid`'s OS threads carry each name (/proc's comm): which pool grew."""
    names: Counter[str] = Counter()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return names
    for task in tasks:
        try:
            names[Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()] += 1
        except OSError:
            pass
    return names


def train_counts(logdir: Path) -> tuple[int, int] | None:
    """(env steps, learner steps) of train.csv's last row."""
    try:
        rows = list(csv.DictReader(io.StringIO((logdir / "train.csv").read_text())))
    except OSError:
        return None
    if not rows:
        return None
    return int(float(rows[-1]["env_steps"])), int(float(rows[-1]["learner_steps"]))


def env_ms_per_step(logdir: Path, runners: int) -> float | None:
    """The runners' own milliseconds per env step (their CSVs' last rows, averaged): the
    machine's speed at plain Python work, which the learner does not affect."""
    readings = []
    for i in range(runners):
        try:
            rows = list(csv.DictReader(io.StringIO((logdir / f"runner-{i}.csv").read_text())))
        except OSError:
            continue
        if rows and rows[-1].get("env_ms_per_step"):
            readings.append(float(rows[-1]["env_ms_per_step"]))
    return statistics.fmean(readings) if readings else None


def slope_per_hour(times: list[float], values: list[float]) -> float | None:
    """The least-squares slope of `values` over `times` (seconds), per hour."""
    if len(times) < 3:
        return None
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return None
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) \
        / spread


def rate(samples: list[dict[str, Any]], key: str) -> float | None:
    """`key` per second between the first and the last of `samples`."""
    if len(samples) < 2 or samples[-1]["t"] == samples[0]["t"]:
        return None
    return (samples[-1][key] - samples[0][key]) / (samples[-1]["t"] - samples[0]["t"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=None,
                        help="samples before this are left out (default: a tenth of the "
                             "run, at least two samples)")
    parser.add_argument("--kill-every-s", type=float, default=300.0,
                        help="SIGKILL a runner this often (0: never)")
    parser.add_argument("--agent", choices=sorted(AGENTS), default="vtrace")
    parser.add_argument("--environment", default="gym:CartPole-v1")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=8)
    parser.add_argument("--logdir", default=None,
                        help="the run's directory (default: a fresh runs/soak-<time>)")
    args = parser.parse_args()
    if args.minutes <= 0 or args.sample_s <= 0:
        parser.error("--minutes and --sample-s must be > 0")
    warmup_s = (args.warmup_s if args.warmup_s is not None
                else max(args.minutes * 6, 2 * args.sample_s))

    from launch.backends.local_mp import run_local_mp
    from launch.experiment import Experiment
    from seed_agents.utils.reference import machine_report

    logdir = Path(args.logdir or time.strftime("runs/soak-%Y%m%d-%H%M%S"))
    experiment = Experiment(
        builder=AGENTS[args.agent](),
        environment=args.environment, num_runners=args.runners,
        envs_per_runner=args.envs_per_runner, max_env_steps=10**12,
        max_wall_s=args.minutes * 60, logdir=str(logdir), log_every_s=30.0,
        evaluate_every_s=30.0, checkpoint_every_s=300.0)
    outcome: dict[str, Any] = {}

    def train() -> None:
        try:
            outcome["result"] = run_local_mp(experiment, stream=sys.stderr)
        except BaseException as error:  # noqa: BLE001 - reported in the JSON
            outcome["error"] = f"{type(error).__name__}: {error}"

    thread = threading.Thread(target=train, name="soak-run")
    start = time.monotonic()
    thread.start()
    samples: list[dict[str, Any]] = []
    # Each watched process's thread names at its first steady sample and at the last one.
    names_first: dict[str, Counter[str]] = {}
    names_last: dict[str, Counter[str]] = {}
    # And their resident memory per mapping, at the same two samples.
    mappings_first: dict[str, dict[str, float]] = {}
    mappings_last: dict[str, dict[str, float]] = {}
    kills = 0
    next_kill = start + args.kill_every_s if args.kill_every_s else float("inf")
    while thread.is_alive():
        thread.join(args.sample_s)
        now = time.monotonic()
        try:
            pids = json.loads((logdir / "nodes.json").read_text())
        except (OSError, ValueError):
            continue
        counts = train_counts(logdir)
        readings = {name: proc_readings(pids[node]) for name, node in WATCHED.items()
                    if node in pids}
        if counts is None or None in readings.values() or len(readings) < len(WATCHED):
            continue
        sample = {"t": now - start, "env_steps": counts[0], "learner_steps": counts[1],
                  "env_ms_per_step": env_ms_per_step(logdir, args.runners)}
        for name, reading in readings.items():
            sample.update({f"{name}_{k}": v for k, v in reading.items()})
        samples.append(sample)
        for name, node in WATCHED.items():
            names_last[name] = thread_names(pids[node])
            mappings_last[name] = rss_by_mapping(pids[node])
            if sample["t"] >= warmup_s:
                names_first.setdefault(name, names_last[name])
                mappings_first.setdefault(name, mappings_last[name])
        print(json.dumps({k: v if v is None else round(v, 4) for k, v in sample.items()}),
              file=sys.stderr, flush=True)
        if now >= next_kill and thread.is_alive():
            runner = f"runner-{kills % args.runners}"
            if runner in pids:
                try:
                    os.kill(pids[runner], signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
            next_kill = now + args.kill_every_s

    steady = [s for s in samples if s["t"] >= warmup_s]
    third = max(len(steady) // 3, 2)
    first, last = steady[:third], steady[-third:]
    figures: dict[str, Any] = {}
    for name in WATCHED:
        for reading in ("rss_mib", "anon_mib", "file_mib", "threads", "fds"):
            key = f"{name}_{reading}"
            if not steady or key not in steady[0]:
                continue
            slope = slope_per_hour([s["t"] for s in steady], [s[key] for s in steady])
            figures[f"{key}_per_h"] = None if slope is None else round(slope, 2)
            if steady:
                figures[f"{key}_first_last"] = [round(steady[0][key], 1),
                                                round(steady[-1][key], 1)]
        # Names whose thread count changed over the steady samples: a pool that grows.
        at_first, at_last = names_first.get(name, Counter()), names_last.get(name, Counter())
        changed = {n: at_last[n] - at_first[n] for n in at_first | at_last
                   if at_last[n] != at_first[n]}
        figures[f"{name}_thread_names_changed"] = dict(sorted(changed.items()))
        figures[f"{name}_rss_mib_change_by_mapping"] = growth_by_mapping(
            mappings_first.get(name, {}), mappings_last.get(name, {}))
    before, after = rate(first, "env_steps"), rate(last, "env_steps")
    result = outcome.get("result")
    cost = [statistics.fmean(s["env_ms_per_step"] for s in part if s["env_ms_per_step"])
            if any(s["env_ms_per_step"] for s in part) else None for part in (first, last)]
    ratio = after / before if before and after is not None else None
    print(json.dumps({
        "bench": "soak",
        "value": None if after is None else round(after),
        "unit": "env_steps/s (last third)",
        "baseline": None if before is None else round(before),
        "baseline_kind": "env_steps/s in the first third after warm-up",
        "ratio": None if ratio is None else round(ratio, 3),
        # The machine's own speed can drift over an hour on a shared host: the runners'
        # env-stepping cost in the same thirds, and the ratio at equal cost.
        "env_ms_per_step_first_last": [None if c is None else round(c, 4) for c in cost],
        "ratio_at_equal_env_cost": (round(ratio * cost[1] / cost[0], 3)
                                    if ratio is not None and None not in cost else None),
        "learner_steps_per_s_first_last": [
            None if r is None else round(r, 2)
            for r in (rate(first, "learner_steps"), rate(last, "learner_steps"))],
        **figures,
        "agent": args.agent,
        "minutes": args.minutes,
        "samples": len(samples),
        "steady_samples": len(steady),
        "warmup_s": warmup_s,
        "runner_kills": kills,
        "restarts": None if result is None else result.restarts,
        "env_steps": None if result is None else result.env_steps,
        "stop_reason": None if result is None else result.stop_reason,
        "error": outcome.get("error"),
        "logdir": str(logdir),
        "machine": machine_report(),
    }))


if __name__ == "__main__":
    main()
