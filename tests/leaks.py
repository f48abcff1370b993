"""What a test leaves behind: Python threads, child processes and listening sockets; and
what a run leaves on disk that it must not (`files_holding`: a secret in its logdir).

`conftest.py` snapshots these before each test and fails the test if, after it, anything
new is still there once a generous wait has passed (servers stop asynchronously: a gRPC
server's grace, a process's exit). A suite that leaks these slows every later test and,
on a shared machine, everything else; the issue that asked for this check found ~870
threads in pytest after half the suite.

What lives for the whole interpreter by design is not a leak and is left out here:
multiprocessing's resource tracker (one per interpreter, started by the first `spawn`)
and gRPC asyncio's poller thread (one per interpreter, started by the first asyncio
server or channel, `_poll_wrapper`).
Threads are compared as objects, processes by (pid, start time), so a reused pid is not
mistaken for the old process.
"""

from __future__ import annotations

import collections
import dataclasses
import faulthandler
import gc
import multiprocessing.resource_tracker
import os
import re
import tempfile
import threading
import time

import psutil

WAIT_S = 60.0  # a busy machine stops a server slowly; a clean test waits not at all


@dataclasses.dataclass(frozen=True)
class Snapshot:
    threads: frozenset[threading.Thread]
    processes: frozenset[tuple[int, float]]
    listening: frozenset[tuple[str, int]]


def _interpreter_wide_pids() -> set[int]:
    tracker = getattr(multiprocessing.resource_tracker, "_resource_tracker", None)
    pid = getattr(tracker, "_pid", None)
    return {pid} if pid else set()


def _processes() -> frozenset[tuple[int, float]]:
    found = set()
    skip = _interpreter_wide_pids()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in skip or child.status() == psutil.STATUS_ZOMBIE:
                continue
            found.add((child.pid, child.create_time()))
        except psutil.Error:  # it ended while we looked
            continue
    return frozenset(found)


def _listening() -> frozenset[tuple[str, int]]:
    return frozenset(
        (c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN)


def _threads() -> frozenset[threading.Thread]:
    return frozenset(t for t in threading.enumerate()
                     if t.is_alive() and not t.name.endswith("(_poll_wrapper)"))


def snapshot() -> Snapshot:
    return Snapshot(_threads(), _processes(), _listening())


def left_behind(before: Snapshot, wait_s: float = WAIT_S) -> list[str]:
    """What is there now and was not in `before`, after waiting up to `wait_s` for it to go."""
    deadline = time.monotonic() + wait_s
    while True:
        now = snapshot()
        threads = [t for t in now.threads - before.threads if t.is_alive()]
        processes = sorted(now.processes - before.processes)
        listening = sorted(now.listening - before.listening)
        if not (threads or processes or listening) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    found = [f"thread {t.name!r} (daemon={t.daemon})" for t in threads]
    for pid, _ in processes:
        try:
            found.append(f"process {pid}: {' '.join(psutil.Process(pid).cmdline())[:120]}")
        except psutil.Error:
            found.append(f"process {pid}")
    found += [f"listening socket {ip}:{port}" for ip, port in listening]
    return found


def collect_garbage(look_every_s: float) -> tuple[float, str]:
    """A full collection: (its seconds, where the calling thread spent it, or "" if it
    ended within `look_every_s`).

    A collection with TensorFlow loaded takes ~0.15 s; one that takes many seconds is a
    finalizer that waits (a freed server joining its threads, a writer flushing to a
    server that is gone) or a heap the collector walks slowly on a loaded machine.
    faulthandler's watchdog dumps every thread's stack each `look_every_s`; the calling
    thread's innermost frames seen most often name the Python finalizer, or end in this
    function when the time went in native code (the walk, or a C++ destructor).
    """
    ident = threading.get_ident()
    with tempfile.TemporaryFile("w+") as dump:
        start = time.monotonic()
        faulthandler.dump_traceback_later(look_every_s, repeat=True, file=dump)
        try:
            gc.collect()
        finally:
            faulthandler.cancel_dump_traceback_later()
        seconds = time.monotonic() - start
        dump.seek(0)
        text = dump.read()
    stacks: list[list[str]] = []
    ours = False
    for line in text.splitlines():
        if line.startswith("Timeout"):  # one dump of every thread begins
            ours = False
        elif header := re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", line):
            ours = int(header.group(1), 16) == ident
            if ours:
                stacks.append([])
        elif ours and (frame := re.match(r'\s*File "(.+)", line (\d+) in (\S+)', line)):
            path = "/".join(frame.group(1).split(os.sep)[-2:])
            stacks[-1].append(f"{path}:{frame.group(2)} in {frame.group(3)}")
    if not stacks:
        return seconds, ""
    tops = collections.Counter("; ".join(stack[:2]) for stack in stacks)
    top, count = tops.most_common(1)[0]
    return seconds, f"{top} ({count} of {len(stacks)} looks)"


def files_holding(root: str | os.PathLike[str], secret: str) -> list[str]:
    """The files under `root` (paths relative to it) whose bytes contain `secret`: a run's
    logdir, which may be a bucket more people read than may join the run, must hold no
    secret in any file (records, logs, CSV, TensorBoard events, checkpoints)."""
    assert secret, "an empty secret is in every file"
    needle = secret.encode()
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(os.path.relpath(path, root))
    return sorted(found)
