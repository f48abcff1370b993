"""benchmarks/soak.py's readings and fits, on known answers (the hour-long run itself is a
benchmark, not a test)."""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slopes_are_per_hour_and_flat_readings_have_none(soak):
    times = [0.0, 30.0, 60.0, 90.0]
    assert soak.slope_per_hour(times, [100.0, 101.0, 102.0, 103.0]) == pytest.approx(120.0)
    assert soak.slope_per_hour(times, [5.0] * 4) == 0.0
    assert soak.slope_per_hour(times[:2], [1.0, 2.0]) is None  # too few to fit
    samples = [{"t": 10.0, "env_steps": 1_000}, {"t": 20.0, "env_steps": 6_000}]
    assert soak.rate(samples, "env_steps") == 500.0 and soak.rate(samples[:1], "env_steps") is None


def test_proc_readings_see_this_process_grow_threads_and_descriptors(soak):
    # Threads of earlier tests may still be ending: measure until a quiet moment, when
    # the only change between two readings is the thread and the file opened here.
    for _ in range(50):
        before = soak.proc_readings(os.getpid())
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        with open(__file__):
            thread.start()
            during = soak.proc_readings(os.getpid())
        stop.set()
        thread.join()
        if (during["threads"], during["fds"]) == (before["threads"] + 1, before["fds"] + 1):
            break
    assert before["rss_mib"] > 0
    assert during["threads"] == before["threads"] + 1
    assert during["fds"] == before["fds"] + 1
    assert soak.proc_readings(2**22 + 12345) is None  # no such process


def test_the_runners_env_cost_is_read_from_their_csvs_last_rows(soak, tmp_path):
    header = "env_steps,env_ms_per_step\n"
    (tmp_path / "runner-0.csv").write_text(header + "10,0.5\n20,0.02\n")
    (tmp_path / "runner-1.csv").write_text(header + "30,0.04\n")
    assert soak.env_ms_per_step(tmp_path, 2) == pytest.approx(0.03)
    assert soak.env_ms_per_step(tmp_path, 3) == pytest.approx(0.03)  # runner-2 not yet
    assert soak.env_ms_per_step(tmp_path / "none", 2) is None
