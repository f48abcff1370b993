"""The opt-in memory profile of a node: which nodes a setting names, and what it reports."""

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seed_agents.utils.memory_profile import MemoryProfile, ProfileSetting, profile_setting

ROOT = Path(__file__).resolve().parents[1]


def test_a_setting_names_nodes_by_name_by_prefix_or_all():
    assert profile_setting("learner", "learner:600") == ProfileSetting(600.0, python=False)
    assert profile_setting("replay", "learner:600") is None
    assert profile_setting("runner-3", "replay:5, runner:30:python") == ProfileSetting(
        30.0, python=True)  # runner-N by its prefix
    assert profile_setting("evaluator", "*:60") == ProfileSetting(60.0, python=False)
    assert profile_setting("learner", "") is None


@pytest.mark.parametrize("setting", ["learner", "learner:0", "learner:soon", ":60", "a:1,b",
                                     "learner:60:native", "learner:nan", "learner:inf"])
def test_a_setting_that_does_not_read_is_refused_naming_the_form(setting):
    with pytest.raises(ValueError, match="node:seconds"):
        profile_setting("learner", setting)


def test_the_report_names_the_line_whose_allocations_grew():
    out = io.StringIO()
    profile = MemoryProfile(0.3, out, python=True)
    kept = []
    try:
        deadline = time.monotonic() + 60
        # The first report is the baseline; blocks kept after it must show in a later one.
        while "baseline" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        kept.extend(bytearray(1000) for _ in range(5000))  # ~5 MiB, 10,000 blocks
        # The next report may have begun while the list grew; the one after may not.
        reports = out.getvalue().count("memory profile at")
        while (out.getvalue().count("memory profile at") < reports + 2
               and time.monotonic() < deadline):
            time.sleep(0.05)
    finally:
        profile.close()
    report = out.getvalue().split("memory profile at")[reports + 2]
    first_site = report.splitlines()[1]
    assert re.search(r"rss [\d.]+ MiB \([+-][\d.]+\).*traced [\d.]+ MiB \(\+[45]\.\d\)",
                     report), report
    assert re.search(r"\+[45]\.\d+ MiB \(\+10,\d{3} blocks\) tests/test_memory\.py:\d+",
                     first_site), report


def test_the_heap_figures_see_blocks_kept_and_freed():
    from seed_agents.utils.malloc import heap_figures, malloc_trim

    if heap_figures() is None:
        pytest.skip("not glibc")
    before = heap_figures()
    kept = [bytearray(4000) for _ in range(5000)]  # ~20 MB in small blocks, from the heap
    held = heap_figures()
    assert held.in_use_mib - before.in_use_mib > 15, (before, held)
    del kept
    freed = heap_figures()
    assert held.in_use_mib - freed.in_use_mib > 15, (held, freed)
    assert malloc_trim() in (True, False)


_ARENAS_SCRIPT = """
import sys, threading
from seed_agents.utils.malloc import arena_count, limit_arenas
print(limit_arenas(int(sys.argv[1])) if sys.argv[1] != "none" else None)
together = threading.Barrier(8)
def work():
    blocks = [bytearray(100_000) for _ in range(4)]  # from an arena: under mmap's 128 KiB
    together.wait()  # all eight hold their blocks at once: no arena is freed for reuse
    del blocks
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(arena_count())
"""


@pytest.mark.parametrize("limit, environment, most", [
    ("2", {}, 2),  # capped
    ("2", {"SEED_AGENTS_MALLOC_ARENAS": "3"}, 3),  # the variable overrides the caller
    ("none", {}, None),  # glibc's default: a new arena per thread, up to 8 per core
])
def test_the_arena_limit_caps_the_arenas_threads_make(limit, environment, most):
    from seed_agents.utils.malloc import arena_count

    if arena_count() is None:
        pytest.skip("not glibc")
    env = {k: v for k, v in os.environ.items() if k != "SEED_AGENTS_MALLOC_ARENAS"}
    ran = subprocess.run([sys.executable, "-c", _ARENAS_SCRIPT, limit],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**env, **environment, "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr
    accepted, arenas = ran.stdout.split()
    if most is None:
        assert int(arenas) >= 8, ran.stdout  # the main one and one per thread
    else:
        assert accepted == "True" and 1 <= int(arenas) <= most, ran.stdout


def test_a_bad_arena_setting_is_named_before_malloc_is_touched(monkeypatch):
    from seed_agents.utils.malloc import arena_count, limit_arenas

    if arena_count() is None:
        pytest.skip("not glibc")
    monkeypatch.setenv("SEED_AGENTS_MALLOC_ARENAS", "two")
    with pytest.raises(ValueError, match=r"SEED_AGENTS_MALLOC_ARENAS='two': expected a whole"):
        limit_arenas(2)
    monkeypatch.setenv("SEED_AGENTS_MALLOC_ARENAS", "-1")
    with pytest.raises(ValueError, match="an arena limit must be >= 1, got -1"):
        limit_arenas()


def test_tensorboard_rows_leave_no_native_memory_behind(tmp_path):
    # tf.summary.scalar left ~80 bytes of C heap per scalar (1.3 KB a row of 16 here):
    # a learner's row a second grew it ~5 MiB an hour. The logger writes event protos.
    from seed_agents.utils.loggers import TensorBoardLogger
    from seed_agents.utils.malloc import heap_figures

    if heap_figures() is None:
        pytest.skip("not glibc")
    logger = TensorBoardLogger(tmp_path, "learner", step_key="learner_steps")
    row = {f"metric_{i}": float(i) for i in range(15)}
    try:
        for step in range(300):  # warm-up: buffers and the writer's queue at their size
            logger.write({**row, "learner_steps": step})
        before = heap_figures().in_use_mib
        for step in range(300, 3300):
            logger.write({**row, "learner_steps": step})
        grown_kib = (heap_figures().in_use_mib - before) * 1024
    finally:
        logger.close()
    assert grown_kib < 400, f"{grown_kib:.0f} KiB for 3,000 rows"  # tf.summary: ~3,800


def test_a_stopped_run_closed_its_replay_writers_and_dataset_iterators(tmp_path):
    # A Reverb writer or dataset iterator left to the garbage collector after its server
    # stopped blocks the collection in its destructor (12-48 s measured in this suite):
    # the learner node closes them while the replay is up.
    import gc

    from builders.vtrace import VTraceBuilder
    from launch.backends.inprocess import run_inprocess
    from launch.experiment import Experiment
    from seed_agents.agents.vtrace.config import VTraceConfig
    from seed_agents.learning.batches import Batches
    from seed_agents.replay.unrolls import UnrollWriter

    experiment = Experiment(
        VTraceBuilder(VTraceConfig(unroll_length=5, batch_size=4, queue_size=16,
                                   hidden_sizes=(16,))),
        "fake:obs=4,len=20", num_runners=1, envs_per_runner=4, max_env_steps=400,
        logdir=str(tmp_path), checkpoint_every_s=None)
    # Other tests in this process may have left learners and writers of their own.
    before = {id(o) for o in gc.get_objects() if isinstance(o, UnrollWriter | Batches)}
    assert "budget" in run_inprocess(experiment).stop_reason
    # Whatever reference cycles still hold is kept in gc.garbage by this collection, not
    # freed: none of it may be a writer or an iterator still open.
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        held = [o for o in [*gc.garbage, *gc.get_objects()]
                if isinstance(o, UnrollWriter | Batches) and id(o) not in before]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert [o for o in held if isinstance(o, UnrollWriter) and not o._closed] == []
    assert [o for o in held if isinstance(o, Batches) and o._iterator is not None] == []
