"""Where a long run's memory goes: a node's resident memory, the C heap, and (on request)
the Python allocation sites that grew.

A learner that grows a few MiB an hour is found by comparing what it holds now with what
it held after warm-up. Set `SEED_AGENTS_MEMORY_PROFILE=learner:600` (node names, each
with its period in seconds, comma-separated; `*` for every node, `runner` for each
`runner-N`) and each named node of a `local_mp` run writes to its log, every period, its
resident memory and the C heap's bytes in use and free (glibc's `mallinfo2`, every arena),
each against its first report:

    memory profile at 1200 s: rss 551.2 MiB (+6.3 since 600 s); heap in use 210.4 MiB
    (+0.2), free in heap 31.0 MiB (+5.9), mmapped 98.1 MiB (+0.0)

Growth in use is memory something keeps (a leak, Python's or a library's); growth of the
free bytes is the allocator holding memory that was freed (fragmentation, which
`seed_agents.utils.malloc.malloc_trim` returns). `learner:600:python` also
traces Python's allocations (`tracemalloc`) and lists the sites that grew most; tracing
slows the node's Python several times over, so it is for finding a cause.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
import tracemalloc
from typing import TextIO

from seed_agents.utils.malloc import arena_count, heap_figures

ENVIRONMENT_VARIABLE = "SEED_AGENTS_MEMORY_PROFILE"
_FRAMES = 8  # enough to see past a library's own frames to the caller that keeps a block


@dataclasses.dataclass(frozen=True)
class ProfileSetting:
    period_s: float
    python: bool  # trace Python's allocations too


def profile_setting(node: str, setting: str | None = None) -> ProfileSetting | None:
    """What `setting` (default: the environment variable) asks of `node`, or None.

    Raises:
      ValueError: For a setting that does not read as `node:seconds[:python],...`.
    """
    setting = os.environ.get(ENVIRONMENT_VARIABLE, "") if setting is None else setting
    for part in filter(None, (p.strip() for p in setting.split(","))):
        name, seconds, *mode = [*part.split(":"), ""][:max(part.count(":") + 1, 2)]
        try:
            period = float(seconds)
        except ValueError:
            period = -1.0
        if not name or not math.isfinite(period) or period <= 0 or mode not in ([], ["python"]):
            raise ValueError(f"{ENVIRONMENT_VARIABLE}={setting!r}: each entry must be "
                             "node:seconds or node:seconds:python with seconds > 0, e.g. "
                             f"learner:600; got {part!r}.")
        if name in (node, "*") or node.startswith(f"{name}-"):
            return ProfileSetting(period, bool(mode))
    return None


def _rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class MemoryProfile:
    """Reports this process's memory every `period_s`, against its first report."""

    def __init__(self, period_s: float, out: TextIO, python: bool = False, top: int = 12):
        self._period_s = period_s
        self._out = out
        self._python = python
        self._top = top
        self._stop = threading.Event()
        if python:
            tracemalloc.start(_FRAMES)
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="memory-profile", daemon=True)
        self._thread.start()

    def _readings(self) -> dict[str, float]:
        readings = {"rss": _rss_mib()}
        heap = heap_figures()
        if heap is not None:
            readings.update({"heap in use": heap.in_use_mib, "free in heap": heap.free_mib,
                             "mmapped": heap.mmapped_mib})
        return readings

    def _run(self) -> None:
        first = None  # (seconds, readings, snapshot) of the first report: warm-up is over
        while not self._stop.wait(self._period_s):
            snapshot = (tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)]) if self._python else None)
            now, readings = time.monotonic() - self._start, self._readings()
            if snapshot is not None:
                readings["traced"] = sum(s.size for s in snapshot.statistics("filename")) / 2**20
            if first is None:
                first = (now, readings, snapshot)
            since, base, base_snapshot = first
            figures = "; ".join(
                f"{name} {value:.1f} MiB" + ("" if first[0] == now else
                                             f" ({value - base[name]:+.1f})")
                for name, value in readings.items())
            arenas = arena_count()
            if arenas is not None:  # glibc: free pages stay in the arena that freed them
                figures += f"; {arenas} malloc arenas"
            lines = [f"memory profile at {now:.0f} s: {figures}"
                     + (" (the baseline of later reports)" if since == now
                        else f" (changes since {since:.0f} s)")]
            if snapshot is not None and base_snapshot is not snapshot:
                for stat in snapshot.compare_to(base_snapshot, "traceback")[:self._top]:
                    # The allocating line first, then its callers (tracebacks run oldest
                    # first).
                    frames = " <- ".join(f"{_short(f.filename)}:{f.lineno}"
                                         for f in reversed(stat.traceback[-4:]))
                    lines.append(f"  {stat.size_diff / 2**20:+.3f} MiB "
                                 f"({stat.count_diff:+,} blocks) {frames}")
            print("\n".join(lines), file=self._out, flush=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._python:
            tracemalloc.stop()


def _short(filename: str) -> str:
    """A library's file from its package on, a file under the working directory relative
    to it, any other file as it is."""
    at = filename.rfind("site-packages/")
    if at >= 0:
        return filename[at + len("site-packages/"):]
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


def start_from_environment(node: str, out: TextIO) -> MemoryProfile | None:
    """Starts a `MemoryProfile` for `node` when the environment asks for one."""
    setting = profile_setting(node)
    return None if setting is None else MemoryProfile(setting.period_s, out, setting.python)
