"""Shared fixtures: TensorFlow sized for a 2-core machine, and a check that every test
stops what it starts."""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import psutil  # noqa: E402
import pytest  # noqa: E402

from seed_agents.utils.tf_threads import configure_tf_threads  # noqa: E402
from tests import leaks  # noqa: E402

configure_tf_threads(1, 1)

_START_THREADS = psutil.Process().num_threads()

# A stopped Reverb server keeps its ~37 native threads until the object is freed, and a
# test's servers often sit in reference cycles that only a full collection frees: 240-600
# such threads piled up in a worker, some waking a few times a second. A full collection
# costs ~0.15 s with TensorFlow loaded, so it runs only when the worker holds this many
# more threads than after the last one.
_COLLECT_AFTER_NEW_THREADS = 64
_threads_after_collect = _START_THREADS


# Teardowns of this check that took over `_SLOW_TEARDOWN_S`: (test, seconds waiting for
# what the test started to go, seconds in the collection, where the collection spent them,
# looked at each second), listed in the summary. A slow one costs the
# suite its length on one worker; the list says where to look (collections of 9-95 s
# were seen in fresh-clone runs, where ~0.15 s is usual).
_SLOW_TEARDOWN_S = 3.0
_SLOW_TEARDOWNS: list[tuple[str, float, float, str]] = []


# CPU seconds per test (`pytest --cpu-durations=N` lists the N largest): the test's own
# process and the child processes it waited for (a local_mp run's nodes, a CLI command),
# not Ray's workers (the raylet's children). The suite is CPU-bound on 2 cores: these,
# not the wall-clock durations, say where cutting work shortens it.
_CPU_SECONDS: dict[str, float] = {}


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N",
                     help="list the N tests that used the most CPU (with their children)")


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@pytest.fixture(autouse=True)
def _stops_what_it_starts(request):
    """Fails a test that leaves a thread, a child process or a listening socket behind;
    frees what reference cycles still hold once native threads pile up."""
    global _threads_after_collect
    before = leaks.snapshot()
    cpu_before = _cpu_seconds()
    yield
    _CPU_SECONDS[request.node.nodeid] = _cpu_seconds() - cpu_before
    start = time.monotonic()
    left = leaks.left_behind(before)
    waited = time.monotonic() - start
    assert not left, "the test left behind: " + "; ".join(left)
    collected, where = 0.0, ""
    if psutil.Process().num_threads() > _threads_after_collect + _COLLECT_AFTER_NEW_THREADS:
        collected, where = leaks.collect_garbage(look_every_s=1.0)
        _threads_after_collect = psutil.Process().num_threads()
    if waited + collected > _SLOW_TEARDOWN_S:
        _SLOW_TEARDOWNS.append((request.node.nodeid, round(waited, 1), round(collected, 1),
                                where))


# The files that take longest, longest first (durations on 2 cores): `.ci/run` hands files
# to its workers in collection order (`--no-loadscope-reorder`; xdist would otherwise order
# them by their number of tests), so the long ones start at once instead of last, where one
# of them would be the whole suite's tail. The rest keep their alphabetical order.
_LONGEST_FILES = ("test_ray_backend.py", "test_local_mp.py", "test_dqn_example.py",
                  "test_continuous.py", "test_r2d2.py", "test_launch.py",
                  "test_custom_agent_commands.py", "test_after_training.py", "test_tuning.py",
                  "test_docs.py")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        return _LONGEST_FILES.index(name) if name in _LONGEST_FILES else len(_LONGEST_FILES)

    items.sort(key=rank)  # stable: each file's tests keep their order


# Each xdist worker's (start, end) thread counts, gathered by the controlling process.
_WORKER_THREADS: dict[str, tuple[int, int]] = {}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controlling process reports it
        workeroutput["threads"] = (_START_THREADS, psutil.Process().num_threads())
        workeroutput["slow_teardowns"] = _SLOW_TEARDOWNS
        workeroutput["cpu_seconds"] = _CPU_SECONDS


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    threads = getattr(node, "workeroutput", {}).get("threads")
    if threads:
        _WORKER_THREADS[node.gateway.id] = threads
    _SLOW_TEARDOWNS.extend(getattr(node, "workeroutput", {}).get("slow_teardowns", []))
    _CPU_SECONDS.update(getattr(node, "workeroutput", {}).get("cpu_seconds", {}))


def pytest_terminal_summary(terminalreporter, config):
    if top := config.getoption("--cpu-durations"):
        terminalreporter.write_line(
            f"CPU seconds of the {top} costliest tests (with the children they waited for); "
            f"all {len(_CPU_SECONDS)}: {sum(_CPU_SECONDS.values()):.0f} s")
        for test, seconds in sorted(_CPU_SECONDS.items(), key=lambda item: -item[1])[:top]:
            terminalreporter.write_line(f"{seconds:8.1f}s {test}")
    counts = _WORKER_THREADS or {"the pytest process": (_START_THREADS,
                                                        psutil.Process().num_threads())}
    for who, (start, end) in sorted(counts.items()):
        terminalreporter.write_line(
            f"threads of {who}: {start} at the start, {end} at the end (operating-system "
            "threads: TensorFlow's and gRPC's own pools included)")
    for test, waited, collected, where in _SLOW_TEARDOWNS:
        terminalreporter.write_line(
            f"slow teardown of {test}: {waited} s waiting for what it started to stop, "
            f"{collected} s collecting garbage" + (f" (in {where})" if where else ""))
