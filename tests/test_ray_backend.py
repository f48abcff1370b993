"""The Ray backend, run briefly for real: a local Ray of its own, a cluster of four
machines that loses a runner's and then the learner's, and on one shared local Ray a
killed runner and R2D2.

Every Ray here stays on loopback: Ray replaces 127.0.0.1 with the machine's interface
address, so the local Ray and the cluster's head use 127.0.0.2 and the other nodes
127.0.0.3 to 127.0.0.5. Each test stops what it starts and checks that the processes
are gone. With pytest-xdist (`.ci/run`, `--dist loadfile`), every test here runs on one
worker: they all use 127.0.0.2, and two Rays there at once would share ports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray")

from builders.vtrace import VTraceBuilder  # noqa: E402
from launch.backends.busy_learner import BUSY_LEARNER_S, WAITING  # noqa: E402
from launch.backends.ray import (  # noqa: E402
    _MAX_CONCURRENCY,
    NAMESPACE,
    NodeActor,
    _start_local_ray,
    _worker_niceness,
    run_ray,
    stop_in_order,
)
from launch.commands import cli  # noqa: E402
from launch.control import ControlClient  # noqa: E402
from launch.experiment import Experiment  # noqa: E402
from launch.program import Node  # noqa: E402
from seed_agents.agents.vtrace.config import VTraceConfig  # noqa: E402
from tests import stopping_nodes  # noqa: E402
from tests.example_runs import EXAMPLES, check_example  # noqa: E402
from tests.leaks import files_holding  # noqa: E402
from tests.test_own_environments import check_own_environments  # noqa: E402
from tests.test_r2d2 import _experiment as r2d2_experiment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
SMALL = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,))
NODES = {"replay", "learner", "runner-0", "runner-1", "evaluator"}


@pytest.fixture(autouse=True)
def _small_nodes(monkeypatch):
    # Ray workers inherit this environment (through the raylet): one TF thread per pool.
    monkeypatch.setenv("SEED_AGENTS_TF_THREADS", "1")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


def _experiment(logdir: Path, max_env_steps: int, evaluate_every_s: float | None = 1.0
                ) -> Experiment:
    return Experiment(
        builder=VTraceBuilder(SMALL),
        environment="gym:CartPole-v1",
        num_runners=2,
        envs_per_runner=4,
        max_env_steps=max_env_steps,
        logdir=str(logdir),
        log_every_s=1.0,
        evaluate_every_s=evaluate_every_s,
        max_wall_s=1800,  # a safety net only: every test asserts the budget stopped the run
    )


def _nodes(logdir: Path) -> dict[str, dict]:
    return json.loads((logdir / "nodes.json").read_text())


def _assert_gone(pids: list[int], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (alive := [p for p in pids if psutil.pid_exists(p)
                     and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]):
        assert time.monotonic() < deadline, f"processes {alive} outlived the run"
        time.sleep(0.2)


def test_cli_passes_ray_address_and_learner_gpus(monkeypatch, capsys, tmp_path):
    calls = []

    def fake_run_ray(experiment, address=None, node_ip_address=None):
        calls.append((experiment, address, node_ip_address))
        raise KeyboardInterrupt  # ends train() before it prints a summary

    monkeypatch.setitem(cli.BACKENDS, "ray", fake_run_ray)
    code = cli.main(["train", "--backend", "ray", "--ray-address", "ray://head:10001",
                     "--learner-gpus", "0.5", "--logdir", str(tmp_path)])
    assert code == 130
    (experiment, address, node_ip), = calls
    assert address == "ray://head:10001" and experiment.learner_gpus == 0.5
    assert node_ip is None
    code = cli.main(["train", "--backend", "ray", "--ray-node-ip", "127.0.0.2", "--logdir",
                     str(tmp_path / "local")])
    assert code == 130 and calls[-1][1:] == (None, "127.0.0.2")  # a local Ray on loopback
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = capsys.readouterr().out
    assert "--ray-address" in help_text and "--learner-gpus" in help_text
    assert "--ray-node-ip" in help_text


def test_local_ray_runs_the_program_and_cleans_up(tmp_path):
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    logdir = tmp_path / "run"
    experiment = _experiment(logdir, 3_000)
    result = run_ray(experiment, node_ip_address="127.0.0.2", num_cpus=5)
    assert files_holding(logdir, experiment.inference_token) == []  # no secret at rest
    assert "budget" in result.stop_reason
    assert result.env_steps >= 3_000
    assert result.learner_steps > 0
    assert result.restarts == 0
    assert not ray.is_initialized()  # the local Ray it started is shut down
    nodes = _nodes(logdir)
    assert set(nodes) == NODES
    assert {n["node_ip"] for n in nodes.values()} == {"127.0.0.2"}
    _assert_gone([n["pid"] for n in nodes.values()])
    # Nor any raylet, GCS or worker of the local Ray.
    _assert_gone([p.pid for p in psutil.Process().children(recursive=True)
                  if p.pid not in children_before])
    assert (logdir / "train.csv").exists() and (logdir / "learner.csv").exists()


def test_the_examples_and_a_users_own_environments_run_on_ray(tmp_path):
    # Here, not beside their other backends: each script starts (and stops) a local Ray of
    # its own on 127.0.0.2, one after another, before the module's shared Ray starts.
    for script in sorted(EXAMPLES):
        (tmp_path / script).mkdir()
        assert check_example(tmp_path / script, script, "ray") == [
            "train", "eval"]
    (tmp_path / "own").mkdir()
    check_own_environments(tmp_path / "own", "ray")


def test_a_local_rays_workers_run_at_the_callers_priority(monkeypatch):
    # Ray nices its workers by 15 unless told otherwise; the local Ray run_ray starts
    # does not, and leaves the variable that tells it as it found it.
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    _start_local_ray(num_cpus=1, _node_ip_address="127.0.0.2")
    try:
        niceness = ray.get(ray.remote(lambda: os.nice(0)).remote(), timeout=120)
    finally:
        ray.shutdown()
    assert niceness == os.nice(0)
    assert "RAY_worker_niceness" not in os.environ
    monkeypatch.setenv("RAY_worker_niceness", "7")  # the user's choice stands
    with _worker_niceness(0):
        assert os.environ["RAY_worker_niceness"] == "7"
    assert os.environ["RAY_worker_niceness"] == "7"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.2", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _group(pgid: int) -> list[int]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
    return found


def _stop(process: subprocess.Popen) -> None:
    """Stops a `ray start --block` and every process it started (its process group).

    Not `ray stop`: that kills every Ray process on the machine, other users' included.
    SIGTERM lets `ray start` stop its node; SIGKILL ends what is left after 30 s.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        if _group(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


@contextlib.contextmanager
def _cluster(log: Path, workers: dict[str, dict[str, float]], num_cpus: int = 3,
             worker_cpus: int = 3, head_resources: dict[str, float] | None = None
             ) -> Iterator[tuple[str, dict[str, str], dict[str, subprocess.Popen]]]:
    """A head on 127.0.0.2 (`num_cpus` CPUs, `head_resources`) and a node per entry of
    `workers` (its loopback IP and custom resources; `worker_cpus` CPUs); yields the
    cluster's address, the environment a driver needs, and each worker node's `ray start`
    process by IP (SIGKILL its process group to lose the machine: its raylet and every
    worker on it).

    Token authentication stays on: every node and the driver get the same token (the
    one `ray get-auth-token --generate` keeps in ~/.ray/auth_token, which a local
    `ray.init` creates anyway) through the yielded environment. Each node is
    `ray start --block` in its own process group, so the test stops exactly the
    processes it started (a group, not a session: see `test_checkpointing._start`). The
    head declares a lost machine dead within about 2 s (Ray's default is 15 s or more):
    a killed raylet refuses each health check at once, while a live one on busy cores has
    10 s to answer each of the 4. Workers run at the test's own priority, as a local
    Ray's do (see `launch.backends.ray._LOCAL_WORKER_NICENESS`), and `ray start` waits up
    to 300 s for its GCS (Ray's 60 s ran out beside two busy loops).
    """
    token = subprocess.run([RAY, "get-auth-token", "--generate"], capture_output=True,
                           text=True, check=True).stdout.strip()
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
               RAY_worker_niceness="0", RAY_gcs_server_request_timeout_seconds="300",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    head_env = dict(env, RAY_health_check_period_ms="500", RAY_health_check_timeout_ms="10000",
                    RAY_health_check_failure_threshold="4")
    # A short temp dir: Ray's Unix socket paths live under it (at most 107 characters).
    temp_dir = tempfile.mkdtemp(prefix="sa-ray-", dir="/tmp")
    port, client, dashboard, *node_ports = _free_ports(3 + 5 * (1 + len(workers)))
    common = ["--object-store-memory=100000000", "--disable-usage-stats"]

    def node_ports_args(ports: list[int]) -> list[str]:
        names = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
                 "dashboard-agent-grpc-port", "metrics-export-port")
        return [f"--{name}={p}" for name, p in zip(names, ports, strict=True)]

    processes: list[subprocess.Popen] = []
    nodes: dict[str, subprocess.Popen] = {}
    try:
        with open(log, "ab") as out:
            processes.append(subprocess.Popen(
                [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.2",
                 f"--port={port}", f"--ray-client-server-port={client}",
                 "--include-dashboard=false", f"--dashboard-port={dashboard}",
                 f"--temp-dir={temp_dir}", f"--num-cpus={num_cpus}", *common,
                 f"--resources={json.dumps(head_resources or {})}",
                 *node_ports_args(node_ports[:5])],
                env=head_env, stdout=out, stderr=subprocess.STDOUT, process_group=0))
            deadline = time.monotonic() + 300
            while not (Path(temp_dir) / "ray_current_cluster").exists():
                assert processes[0].poll() is None, f"the head failed; see {log}"
                assert time.monotonic() < deadline, f"the head did not start; see {log}"
                time.sleep(0.2)
            for i, (ip, resources) in enumerate(workers.items(), start=1):
                nodes[ip] = subprocess.Popen(
                    [RAY, "start", "--block", f"--address=127.0.0.2:{port}",
                     f"--node-ip-address={ip}", f"--resources={json.dumps(resources)}",
                     f"--num-cpus={worker_cpus}", *common,
                     *node_ports_args(node_ports[5 * i:5 * i + 5])],
                    env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0)
                processes.append(nodes[ip])
                # One node at a time: `ray start` gives its raylet 30 s to register, and
                # three starting together on two busy cores missed that.
                while Path(log).read_text().count("Ray runtime started.") < 1 + i:
                    assert nodes[ip].poll() is None, f"node {ip} failed; see {log}"
                    assert time.monotonic() < deadline + 300 * i, f"node {ip} did not start"
                    time.sleep(0.2)
        yield f"127.0.0.2:{port}", env, nodes
    finally:
        for process in reversed(processes):
            _stop(process)
        left = {p.pid: _group(p.pid) for p in processes}
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not any(left.values()), f"Ray processes outlived the cluster: {left}"


def _cluster_driver(address: str, logdir: str, nodes: str, max_env_steps: str) -> None:
    """The cluster tests' driver, in its own process (see the tests for why): joins the
    cluster once `nodes` nodes are alive, runs the program (the learner and replay on
    `learner_host` machines, the runners on `runner_host` ones; a learner that may
    restart once, checkpointing every second), prints the result."""
    ray.init(address=address, _node_ip_address="127.0.0.2")
    deadline = time.monotonic() + 300
    while sum(node["Alive"] for node in ray.nodes()) < int(nodes):
        assert time.monotonic() < deadline, "the nodes did not join"
        time.sleep(0.5)
    ray.shutdown()  # only disconnects: run_ray joins by itself
    experiment = dataclasses.replace(
        _experiment(Path("unused"), int(max_env_steps)), logdir=logdir,
        learner_resource="learner_host", runner_resource="runner_host",
        checkpoint_every_s=1.0, max_node_restarts=1)
    result = run_ray(experiment, address=address, node_ip_address="127.0.0.2")
    print("RESULT " + json.dumps({**dataclasses.asdict(result),
                                  "initialized": ray.is_initialized()}), flush=True)


def _driver(address: str, env: dict[str, str], logdir: str, nodes: int,
            max_env_steps: int, out: Any) -> subprocess.Popen:
    # The driver runs in a subprocess: a driver that joins a cluster by address must have
    # RAY_AUTH_MODE=token in its environment when Ray loads its config (Ray enables token
    # auth by itself only for the clusters it starts or finds), and this process's Ray
    # config was loaded at import.
    return subprocess.Popen(
        [sys.executable, __file__, address, str(logdir), str(nodes), str(max_env_steps)],
        env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _wait_for_learning(logdir: Path, driver: subprocess.Popen, driver_log: Path
                       ) -> dict[str, dict]:
    """The nodes once every node started, the learner has checkpointed and logged
    learner steps after it."""
    deadline = time.monotonic() + 600  # the program starting on a loaded machine
    while True:
        assert driver.poll() is None, driver_log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the learner did not learn and checkpoint"
        checkpoints = logdir / "checkpoints" / "learner"
        if ((logdir / "nodes.json").exists() and checkpoints.is_dir()
                and any(checkpoints.glob("*.index"))
                and (logdir / "learner.csv").exists()
                and len((logdir / "learner.csv").read_text().splitlines()) > 3):
            return _nodes(logdir)
        time.sleep(0.2)


def _wait_for_runners_to_leave(machine: str, logdir: Path, driver: subprocess.Popen,
                               driver_log: Path) -> dict[str, dict]:
    """The nodes once Ray has restarted every runner that ran on `machine` elsewhere."""
    deadline = time.monotonic() + 600
    while True:
        assert driver.poll() is None, driver_log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the lost machine's runners did not come back"
        nodes = _nodes(logdir)
        if all(node["node_ip"] != machine for name, node in nodes.items()
               if name.startswith("runner-")):
            return nodes
        time.sleep(0.2)


def test_a_run_survives_losing_a_runners_machine_and_then_its_learners(tmp_path):
    # Four machines as a cloud would have them: the head (which also steps environments),
    # two that can hold the learner and the replay (`learner_host`) and one more for
    # runners (`runner_host`, which the head offers too). Once the learner has
    # checkpointed, the runners' machine goes as a preempted spot instance does (SIGKILL
    # to its raylet and every process on it): Ray restarts its runner on the head and the
    # run goes on. Then the learner's machine goes: the driver restarts the program on
    # what is left, the learner from its checkpoint, and the run reaches its budget. The
    # logdir is a URL (file://, which TensorFlow opens as it opens gs://): every file goes
    # through `seed_agents.utils.storage`, as on a cloud.
    logdir = tmp_path / "run"
    driver_log = tmp_path / "driver.log"
    spot = "127.0.0.5"
    machines_resources = {"127.0.0.3": {"learner_host": 2}, "127.0.0.4": {"learner_host": 2},
                          spot: {"runner_host": 2}}
    # The program takes 5 CPUs (replay, learner, 2 runners, evaluator): the head's 3 hold
    # the evaluator and, after the losses, both runners.
    with _cluster(tmp_path / "cluster.log", machines_resources, num_cpus=3, worker_cpus=2,
                  head_resources={"runner_host": 2}) as (address, env, machines):
        with open(driver_log, "wb") as out:
            driver = _driver(address, env, f"file://{logdir}", 4, 40_000, out)
            try:
                before = _wait_for_learning(logdir, driver, driver_log)
                runners = {f"runner-{i}": before[f"runner-{i}"]["node_ip"] for i in range(2)}
                # SPREAD put one runner on each machine that offers `runner_host`.
                assert sorted(runners.values()) == ["127.0.0.2", spot], before
                os.killpg(machines[spot].pid, signal.SIGKILL)
                between = _wait_for_runners_to_leave(spot, logdir, driver, driver_log)
                lost = between["learner"]["node_ip"]
                os.killpg(machines[lost].pid, signal.SIGKILL)
                driver.wait(600)
            finally:
                if driver.poll() is None:
                    driver.kill()  # its actors die with it: they belong to its job
                    driver.wait(10)
    output = driver_log.read_text()
    assert driver.returncode == 0, output[-3000:]
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert not result["initialized"]  # disconnected; the cluster was the test's to stop
    assert "budget" in result["stop_reason"]
    assert result["env_steps"] >= 40_000
    assert result["restarts"] >= 2  # the runner Ray restarted, and the program
    # The replay and the learner went to machines with `learner_host`; the runner from
    # the spot machine came back on the head, the learner and the replay stayed.
    assert before["learner"]["node_ip"] in machines_resources
    assert before["replay"]["node_ip"] in machines_resources
    moved = next(name for name, ip in runners.items() if ip == spot)
    assert between[moved]["node_ip"] == "127.0.0.2"
    assert between["learner"] == before["learner"] and between["replay"] == before["replay"]
    assert f"[ray] {moved} restarted by Ray on 127.0.0.2 (it ran on {spot}" in output
    # After the learner's machine went, every node runs on the machines that are left, the
    # learner on the other `learner_host`, restored from its checkpoint; the log says what
    # the restart lost.
    after = _nodes(logdir)
    assert set(after) == NODES
    assert {n["node_ip"] for n in after.values()}.isdisjoint({lost, spot}), after
    assert after["learner"]["node_ip"] in machines_resources
    assert "restart 1 of 1" in output and "from its checkpoint at learner step" in output


def _kill_runner_when_learning(run_name: str, logdir: Path, killed: dict,
                               token: str) -> None:
    """From a thread: once the learner has learned, kill runner-0 (Ray may restart it).

    Waits for nodes.json too: the driver writes it once every node has started, so the
    driver knows runner-0's first process and can tell the restart from it.
    """
    try:
        deadline = time.monotonic() + 600  # the program starting on a loaded machine
        control = None
        while time.monotonic() < deadline:
            if not (logdir / "nodes.json").exists():
                time.sleep(0.2)
                continue
            with contextlib.suppress(ValueError):  # not created yet
                learner = ray.get_actor(f"{run_name}-learner", namespace=NAMESPACE)
                address = ray.get(learner.published.remote(), timeout=60).get("control")
                if address and control is None:
                    control = ControlClient(address, auth_token=token)
            if control is not None:
                status = control.status()
                if status["learner_steps"] > 0:
                    break
            time.sleep(0.2)
        else:
            raise TimeoutError("the learner made no progress")
        control.close()
        runner = ray.get_actor(f"{run_name}-runner-0", namespace=NAMESPACE)
        killed["pid"] = ray.get(runner.info.remote(), timeout=60)["pid"]
        killed["env_steps"] = status["env_steps"]
        ray.kill(runner, no_restart=False)
    except BaseException as error:  # noqa: BLE001 - asserted by the test
        killed["error"] = error


@pytest.fixture(scope="module")
def shared_ray() -> Iterator[None]:
    """One local Ray (127.0.0.2, 5 CPUs) for the tests that need a Ray but not their own:
    run_ray joins a Ray that is already initialized and leaves it running. Module-scoped,
    and its users come after the tests that start their own Ray or cluster."""
    with pytest.MonkeyPatch.context() as patch:
        # Set before the raylet starts: its workers inherit its environment.
        patch.setenv("SEED_AGENTS_TF_THREADS", "1")
        patch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
        _start_local_ray(num_cpus=5, _node_ip_address="127.0.0.2")  # as run_ray's own
        try:
            yield
        finally:
            ray.shutdown()


def test_a_killed_runner_is_restarted_and_counted(tmp_path, shared_ray):
    logdir = tmp_path / "run"
    killed: dict = {}
    experiment = _experiment(logdir, 10_000, evaluate_every_s=None)
    killer = threading.Thread(target=_kill_runner_when_learning,
                              args=("run", logdir, killed, experiment.inference_token))
    killer.start()
    try:
        # No evaluator: the driver must still wait for the learner's control service.
        result = run_ray(experiment)
    finally:
        killer.join(30)
    assert "error" not in killed, killed.get("error")
    assert ray.is_initialized()  # the test's Ray: run_ray joined it and leaves it running
    assert "budget" in result.stop_reason
    assert result.restarts >= 1
    assert result.env_steps >= 10_000 > killed["env_steps"]
    nodes = _nodes(logdir)
    assert nodes["runner-0"]["pid"] != killed["pid"]
    # The killed process and every actor are gone, though this Ray keeps running.
    _assert_gone([killed["pid"], *(n["pid"] for n in nodes.values())])


def test_r2d2_trains_on_ray(tmp_path, shared_ray):
    result = run_ray(r2d2_experiment(tmp_path, evaluate_every_s=1.0))
    assert "budget" in result.stop_reason and result.learner_steps > 0
    assert result.eval_mean_return is not None
    _assert_gone([n["pid"] for n in _nodes(tmp_path).values()])


if __name__ == "__main__":
    _cluster_driver(*sys.argv[1:])


def _stand_in(name: str, group: str, main, **kwargs) -> Any:
    """A `NodeActor` on the shared Ray running one of `tests.stopping_nodes`' mains."""
    node = Node(name=name, group=group, main=main, kwargs=kwargs, num_cpus=0.5)
    return ray.remote(NodeActor).options(max_concurrency=_MAX_CONCURRENCY).remote(node, {}, None)


def test_a_stop_waits_for_a_computing_learner_but_not_a_blocked_one(tmp_path, shared_ray):
    """The learner's share of the 10-s stop runs out while it computes: its actor looks
    at its own CPU time and the driver waits, then the replay gets its seconds. A blocked
    learner is left to the kill, and Ctrl-C again ends the wait for a computing one."""
    # Computing 12 s past its stop: the old stop killed it at 10 s, before its save.
    learner = _stand_in("learner", "learner", stopping_nodes.computes_after_its_stop,
                        compute_s=12.0, marker=str(tmp_path / "saved"))
    replay = _stand_in("replay", "replay", stopping_nodes.stops_at_once,
                       marker=str(tmp_path / "replay"))
    blocked = _stand_in("blocked", "learner", stopping_nodes.blocks_after_its_stop,
                        block_s=600.0, marker=str(tmp_path / "returned"))
    endless = _stand_in("endless", "learner", stopping_nodes.computes_after_its_stop,
                        compute_s=600.0, marker=str(tmp_path / "endless"))
    actors = [learner, replay, blocked, endless]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ray.get([actor.info.remote() for actor in actors], timeout=120)  # all started
        said = io.StringIO()
        stop_in_order([("learner", [learner]), ("replay", [replay])], said)
        assert (tmp_path / "saved").exists() and (tmp_path / "replay").exists()
        assert WAITING in said.getvalue()

        said = io.StringIO()
        start = time.monotonic()
        stop_in_order([("learner", [blocked]), ("replay", [replay])], said)
        assert not (tmp_path / "returned").exists() and WAITING not in said.getvalue()
        assert ray.get(blocked.info.remote(), timeout=60)["alive"]
        assert time.monotonic() - start < BUSY_LEARNER_S

        # Ctrl-C once the wait is announced: the stop ends without the learner's save.
        said = io.StringIO()
        stopped = threading.Event()

        def interrupt_when_waiting() -> None:
            # Waits for the message, however long a loaded machine takes to print it.
            while not stopped.is_set():
                if WAITING in said.getvalue():
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                time.sleep(0.1)

        interrupter = threading.Thread(target=interrupt_when_waiting)
        interrupter.start()
        start = time.monotonic()
        try:
            stop_in_order([("learner", [endless]), ("replay", [replay])], said)
        finally:
            stopped.set()
            interrupter.join()
        assert WAITING in said.getvalue() and not (tmp_path / "endless").exists()
        assert time.monotonic() - start < BUSY_LEARNER_S
    finally:
        signal.signal(signal.SIGINT, previous)
        pids = []
        for actor in actors:
            with contextlib.suppress(Exception):
                pids.append(ray.get(actor.info.remote(), timeout=60)["pid"])
            ray.kill(actor, no_restart=True)
    _assert_gone(pids)
