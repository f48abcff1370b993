"""After training: run.json, `seed-agents eval`, `export` and `plot` on real runs."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from builders.r2d2 import R2D2Builder
from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.commands import cli
from launch.commands.export import METADATA_FILE, ONNX_FILE, export_policy
from launch.commands.plotting import plot_runs
from launch.experiment import Experiment
from launch.restore import load_run
from launch.run_record import read_run_record
from launch.studies.results import continued
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.utils import checkpointing

ROOT = Path(__file__).resolve().parents[1]
# Recurrent, so that export carries a state in and out.
VTRACE = VTraceConfig(unroll_length=5, batch_size=4, queue_size=16, hidden_sizes=(16,),
                      lstm_size=8)
R2D2 = R2D2Config(burn_in=2, trace_length=4, sequence_period=3, n_step=3, batch_size=4,
                  replay_size=200, min_replay_size=8, samples_per_insert=4.0,
                  num_eval_envs=1, hidden_sizes=(16,), lstm_size=8, head_hidden_size=8)


def _train(logdir: Path, builder, environment="gym:CartPole-v1", steps=1_500, **kwargs):
    experiment = Experiment(builder=builder, environment=environment, num_runners=2,
                            envs_per_runner=3, max_env_steps=steps, logdir=str(logdir),
                            log_every_s=0.5, evaluate_every_s=0.2, **kwargs)
    return experiment, run_inprocess(experiment, stream=io.StringIO())


@pytest.fixture(scope="module")
def vtrace_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("runs") / "vtrace"
    experiment, result = _train(logdir, VTraceBuilder(VTRACE))
    return logdir, experiment, result


@pytest.fixture(scope="module")
def r2d2_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("runs") / "r2d2"
    experiment, _ = _train(logdir, R2D2Builder(R2D2), environment="mask:1,3:gym:CartPole-v1",
                           steps=600)
    return logdir, experiment


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.commands.cli", *args], capture_output=True,
                          text=True, env=_env(), cwd=ROOT if cwd is None else cwd, timeout=600)


def _snapshot(directory: Path) -> dict[str, tuple[int, float]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime) for p in directory.rglob("*")
            if p.is_file()}


# --- run.json ------------------------------------------------------------------------------


def test_a_run_records_what_rebuilds_it(vtrace_run):
    logdir, experiment, _ = vtrace_run
    record = read_run_record(logdir)
    assert record.builder == "builders.vtrace.VTraceBuilder"
    assert record.environment == "gym:CartPole-v1" and len(record.started) == 1
    assert record.experiment["num_runners"] == 2 and record.experiment["seed"] == 0
    builder = record.make_builder(cli.AGENTS)
    assert isinstance(builder, VTraceBuilder) and builder.config == experiment.builder.config
    assert record.agent_name(cli.AGENTS) == "vtrace"
    info = checkpointing.latest_checkpoint_info(checkpointing.learner_directory(logdir))
    assert info.format == checkpointing.CHECKPOINT_FORMAT and info.identity == record.identity


# --- eval -------------------------------------------------------------------------------------


def test_eval_plays_greedy_episodes_prints_and_writes_statistics_and_a_video(vtrace_run,
                                                                             tmp_path):
    logdir, _, _ = vtrace_run
    video = tmp_path / "episode.mp4"
    out = _cli("eval", "--logdir", str(logdir), "--episodes", "3", "--video", str(video),
               "--json", str(tmp_path / "eval.json"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("return: mean", "length: mean", "greedy episodes", f"video: {video}"):
        assert line in out.stdout
    results = json.loads((tmp_path / "eval.json").read_text())
    assert results["episodes"] == 3 and len(results["returns"]) == 3
    assert results["return"]["min"] <= results["return"]["mean"] <= results["return"]["max"]
    assert results["return"]["mean"] == pytest.approx(np.mean(results["returns"]))
    assert results["checkpoint"].startswith(str(logdir / "checkpoints" / "learner" / "ckpt-"))
    import imageio.v2 as imageio

    reader = imageio.get_reader(str(video))
    # A frame after the reset and one after each step of the first episode.
    assert reader.count_frames() == results["lengths"][0] + 1
    assert reader.get_meta_data()["size"] == (600, 400)  # CartPole's rgb_array frames
    reader.close()


def test_eval_in_process_matches_the_toolkit_policy_and_defaults_to_the_run_dir(vtrace_run):
    from launch.commands.evaluation import default_results_path, evaluate, write_results

    logdir, _, _ = vtrace_run
    run = load_run(logdir, cli.AGENTS)
    first = evaluate(run, episodes=2, seed=7)
    again = evaluate(load_run(logdir, cli.AGENTS), episodes=2, seed=7)
    assert first.returns == again.returns  # greedy, same seed: the same episodes
    path = write_results(first, run, default_results_path(run))
    assert Path(path).parent == logdir / "eval"
    assert default_results_path(run) != path  # a second evaluation gets its own file


def test_eval_on_another_environment_checks_its_spec_and_rendering(vtrace_run, tmp_path):
    logdir, _, _ = vtrace_run
    before = _snapshot(logdir)
    # The same observations and actions as CartPole: it plays, but cannot render.
    out = _cli("eval", "--logdir", str(logdir), "--env", "fake:obs=4,actions=2,len=20",
               "--episodes", "1", "--video", str(tmp_path / "x.mp4"), cwd=tmp_path)
    assert out.returncode == 2
    assert "fake:obs=4,actions=2,len=20 cannot render frames" in out.stderr
    assert not (tmp_path / "x.mp4").exists()
    out = _cli("eval", "--logdir", str(logdir), "--env", "fake:obs=4,actions=3",
               "--episodes", "1", cwd=tmp_path)
    assert out.returncode == 2 and "actions are () int32, 3 values" in out.stderr
    assert "gym:CartPole-v1, whose actions are () int32, 2 values" in out.stderr
    assert _snapshot(logdir) == before


def test_eval_and_export_refuse_bad_runs_with_one_clear_error(vtrace_run, r2d2_run,
                                                              tmp_path):
    logdir, _, _ = vtrace_run
    # Not a run.
    out = _cli("eval", "--logdir", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and "has no run.json" in out.stderr
    # A run without checkpoints.
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(logdir / "run.json", empty / "run.json")
    out = _cli("export", "--logdir", str(empty), "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert out.returncode == 2 and "holds no learner checkpoint" in out.stderr
    assert not (tmp_path / "x").exists()
    # A checkpoint of another agent (and environment) under this run's record.
    mixed = tmp_path / "mixed"
    shutil.copytree(r2d2_run[0] / "checkpoints", mixed / "checkpoints")
    shutil.copy(logdir / "run.json", mixed / "run.json")
    before = _snapshot(mixed)
    with pytest.raises(ValueError, match="is not of the run") as error:
        load_run(mixed, cli.AGENTS)
    assert "builder 'builders.r2d2.R2D2Builder' (expected 'builders.vtrace.VTraceBuilder')" \
        in str(error.value)
    assert "environment 'mask:1,3:gym:CartPole-v1'" in str(error.value)
    # A named checkpoint that is not there.
    with pytest.raises(ValueError, match="No checkpoint 'ckpt-999'.*it holds: ckpt-"):
        load_run(logdir, cli.AGENTS, checkpoint="ckpt-999")
    # A checkpoint written by a newer version.
    newer = tmp_path / "newer"
    shutil.copytree(logdir, newer)
    _rewrite_metadata(newer, lambda metadata: {**metadata, "format": 99})
    with pytest.raises(ValueError, match="format 99, written by a newer seed-agents"):
        load_run(newer, cli.AGENTS)
    assert _snapshot(mixed) == before


def _rewrite_metadata(logdir: Path, change) -> None:
    """Saves the newest learner checkpoint again with its metadata changed."""
    path = tf.train.latest_checkpoint(checkpointing.learner_directory(logdir))
    reader = tf.train.load_checkpoint(path)
    key = "counts/.ATTRIBUTES/VARIABLE_VALUE"
    metadata = change(json.loads(reader.get_tensor(key).decode()))
    counts = tf.Variable(json.dumps(metadata))
    checkpoint = tf.train.Checkpoint(counts=counts)
    checkpoint.restore(path).expect_partial()
    counts.assign(json.dumps(metadata))
    # The checkpoint now holds the metadata alone: its format is read before any variable.
    checkpoint.write(path)


# --- export ---------------------------------------------------------------------------------

_LOAD_WITHOUT_SEED_AGENTS = """
import sys
sys.path.append({site_packages!r})  # TensorFlow, numpy; not the editable seed-agents
try:
    import seed_agents  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("seed_agents is importable here")
import numpy as np
import tensorflow as tf

inputs = np.load({inputs!r})
policy = tf.saved_model.load({model!r})
outputs = {{}}
for kind in ("greedy", "sample"):
    step = getattr(policy, kind + "_step")
    state = policy.initial_state(int(inputs["observation_0"].shape[0]))
    for t in range({steps}):
        action, _, state = step(inputs[f"observation_{{t}}"], inputs[f"prev_action_{{t}}"],
                                state)
        outputs[f"{{kind}}_{{t}}"] = action.numpy()
signature = policy.signatures["greedy"]
flat = {{"observation": inputs["observation_0"], "prev_action": inputs["prev_action_0"]}}
for i, s in enumerate(tf.nest.flatten(policy.initial_state(len(flat["observation"])))):
    flat[f"state_{{i}}"] = s
outputs["signature_0"] = signature(**flat)["action"].numpy()
np.savez({outputs!r}, **outputs)
"""


def _run_export_without_seed_agents(tmp_path, model, inputs: dict, steps: int) -> dict:
    """The exported model's outputs on `inputs`, computed by a Python that cannot import
    seed-agents (-S: no site processing, so not the editable install's finder either;
    a clean cwd and environment)."""
    np.savez(tmp_path / "inputs.npz", **inputs)
    script = _LOAD_WITHOUT_SEED_AGENTS.format(
        site_packages=_site_packages(), inputs=str(tmp_path / "inputs.npz"),
        model=str(model), steps=steps, outputs=str(tmp_path / "outputs.npz"))
    out = subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(script)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={"PATH": os.environ["PATH"], "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(np.load(tmp_path / "outputs.npz"))


def _site_packages() -> str:
    return next(p for p in sys.path if p.endswith("site-packages") and "python3" in p)


def _toolkit_actions(logdir: Path, inputs: dict, steps: int) -> dict:
    """The toolkit's own policies on the same inputs: greedy, and sampling with seed 0."""
    run = load_run(logdir, cli.AGENTS)
    actions = {}
    for kind, evaluation in (("greedy", True), ("sample", False)):
        policy = run.make_policy(evaluation=evaluation, seed=0)
        batch = len(inputs["observation_0"])
        state = policy.initial_state(batch)
        env_ids = np.full(batch, policy.num_evaluation_envs)  # the first training env's
        for t in range(steps):
            action, _, state = policy.step(inputs[f"observation_{t}"],
                                           inputs[f"prev_action_{t}"], state, env_ids)
            actions[f"{kind}_{t}"] = action
    return actions


@pytest.mark.parametrize("agent", ["vtrace", "r2d2"])
def test_an_exported_policy_loads_without_seed_agents_and_acts_as_the_toolkit(
        agent, vtrace_run, r2d2_run, tmp_path):
    logdir = vtrace_run[0] if agent == "vtrace" else r2d2_run[0]
    model = tmp_path / "model"
    result = export_policy(load_run(logdir, cli.AGENTS), model, seed=0)
    metadata = json.loads((model / METADATA_FILE).read_text())
    assert metadata == result.metadata and metadata["signatures"] == [
        "greedy", "initial_state", "sample"]
    assert metadata["observation"] == {"shape": ["B", 4], "dtype": "float32",
                                       "minimum": metadata["observation"]["minimum"],
                                       "maximum": metadata["observation"]["maximum"]}
    assert metadata["action"] == {"shape": ["B"], "dtype": "int32", "num_values": 2}
    assert [s["shape"] for s in metadata["state"]] == [["B", 8], ["B", 8]]

    steps, batch = 4, 6
    rng = np.random.default_rng(3)
    inputs = {}
    for t in range(steps):
        inputs[f"observation_{t}"] = rng.normal(size=(batch, 4)).astype(np.float32)
        inputs[f"prev_action_{t}"] = rng.integers(0, 2, batch).astype(np.int32)
    exported = _run_export_without_seed_agents(tmp_path, model, inputs, steps)
    expected = _toolkit_actions(logdir, inputs, steps)
    for key, actions in expected.items():
        np.testing.assert_array_equal(exported[key], actions, err_msg=key)
    np.testing.assert_array_equal(exported["signature_0"], expected["greedy_0"])


def test_export_refuses_a_directory_that_holds_files(vtrace_run, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    out = _cli("export", "--logdir", str(vtrace_run[0]), "--out", str(tmp_path / "taken"),
               cwd=tmp_path)
    assert out.returncode == 2 and "is not an empty directory" in out.stderr
    assert os.listdir(tmp_path / "taken") == ["keep.txt"]


def test_export_onnx_of_the_greedy_policy(vtrace_run, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    out = _cli("export", "--logdir", str(vtrace_run[0]), "--out", str(tmp_path / "m"),
               "--onnx", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    session = ort.InferenceSession(str(tmp_path / "m" / ONNX_FILE))
    names = [i.name for i in session.get_inputs()]
    assert names == ["observation", "prev_action", "state_0", "state_1"]
    rng = np.random.default_rng(0)
    observation = rng.normal(size=(5, 4)).astype(np.float32)
    prev_action = np.zeros(5, np.int32)
    state = [np.zeros((5, 8), np.float32)] * 2
    feed = dict(zip(names, [observation, prev_action, *state], strict=True))
    (action,) = session.run(["action"], feed)
    policy = load_run(vtrace_run[0], cli.AGENTS).make_policy(evaluation=True, seed=0)
    expected, _, _ = policy.step(observation, prev_action, tuple(state))
    np.testing.assert_array_equal(action, expected)


# --- plot ----------------------------------------------------------------------------------


def test_continued_drops_the_rows_a_resume_superseded():
    rows = [{"env_steps": s} for s in (0, 100, 200, 300, 150, 250, 400)]
    assert [r["env_steps"] for r in continued(rows)] == [0, 100, 150, 250, 400]


def test_plot_draws_the_curves_of_runs_grouped_by_config(vtrace_run, tmp_path):
    logdir, _, _ = vtrace_run
    # A second seed of the same config (its logs only: plot reads nothing else).
    twin = tmp_path / "twin"
    twin.mkdir()
    for name in ("train.csv", "evaluator.csv"):
        shutil.copy(logdir / name, twin / name)
    record = json.loads((logdir / "run.json").read_text())
    record["experiment"]["seed"] = 1
    (twin / "run.json").write_text(json.dumps(record))
    out = tmp_path / "curves.png"
    drawn = plot_runs([logdir, twin], out)
    assert [len(group["runs"]) for group in drawn["groups"]] == [2]
    assert drawn["groups"][0]["evaluations"] > 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Through the command line; a directory that is not a run fails alone.
    cli_out = _cli("plot", str(logdir), str(tmp_path / "twin"), "--out", str(tmp_path / "b.png"),
                   cwd=tmp_path)
    assert cli_out.returncode == 0, cli_out.stderr[-2000:]
    assert "VTrace gym:CartPole-v1" in cli_out.stdout and "(2 runs)" in cli_out.stdout
    bad = _cli("plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "c.png"), cwd=tmp_path)
    assert bad.returncode == 2 and "has no train.csv" in bad.stderr
    assert not (tmp_path / "c.png").exists()


# --- rendering ------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id,shape,fps", [
    ("gym:CartPole-v1", (400, 600, 3), 50.0),
    ("mask:1,3:gym:CartPole-v1", (400, 600, 3), 50.0),
    ("atari:Pong", (210, 160, 3), 15.0),  # 60 frames/s, 4 per agent step
])
def test_rendering_environments_give_rgb_frames_of_every_step(env_id, shape, fps):
    from seed_agents.envs.rendering import make_rendering_environment

    rendering = make_rendering_environment(env_id, seed=0)
    try:
        env = rendering.environment
        env.reset()
        first = rendering.frame().copy()
        for _ in range(5):
            env.step(0)
        frame = rendering.frame()
        assert frame.shape == shape and frame.dtype == np.uint8 and rendering.fps == fps
        assert first.shape == shape and frame.any()
    finally:
        rendering.environment.close()


def test_an_environment_without_pictures_cannot_render():
    from seed_agents.envs.rendering import CannotRenderError, make_rendering_environment

    with pytest.raises(CannotRenderError, match="fake:obs=4 cannot render frames"):
        make_rendering_environment("fake:obs=4")
    with pytest.raises(CannotRenderError, match="mask:0:fake:obs=4 cannot render"):
        make_rendering_environment("mask:0:fake:obs=4")


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    from builders.sac import SACBuilder
    from seed_agents.agents.sac.config import SACConfig

    config = SACConfig(actor_hidden_sizes=(16,), critic_hidden_sizes=(16,), batch_size=8,
                       min_replay_size=32, samples_per_insert=2.0, replay_size=1_000)
    logdir = tmp_path_factory.mktemp("runs") / "sac"
    _train(logdir, SACBuilder(config), environment="gym:Pendulum-v1", steps=400)
    return logdir


def test_an_exported_continuous_policy_loads_without_seed_agents_and_acts_as_the_toolkit(
        sac_run, tmp_path):
    model = tmp_path / "model"
    result = export_policy(load_run(sac_run, cli.AGENTS), model, seed=0)
    assert result.metadata["action"]["shape"] == ["B", 1]
    assert result.metadata["action"]["dtype"] == "float32" and result.metadata["state"] == []
    # Pendulum's torque is in [-2, 2]: the metadata gives the map from [-1, 1] to it.
    assert result.metadata["environment_action"]["maximum"] == [2.0]
    steps, batch = 3, 5
    rng = np.random.default_rng(4)
    inputs = {}
    for t in range(steps):
        inputs[f"observation_{t}"] = rng.normal(size=(batch, 3)).astype(np.float32)
        inputs[f"prev_action_{t}"] = rng.uniform(-1, 1, (batch, 1)).astype(np.float32)
    exported = _run_export_without_seed_agents(tmp_path, model, inputs, steps)
    expected = _toolkit_actions(sac_run, inputs, steps)
    for key, actions in expected.items():
        np.testing.assert_allclose(exported[key], actions, rtol=1e-6, atol=1e-6,
                                   err_msg=key)
    assert not np.allclose(expected["greedy_0"], expected["sample_0"])  # it does sample
    # And the run evaluates deterministically through the CLI, like the discrete agents.
    out = _cli("eval", "--logdir", str(sac_run), "--episodes", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "return" in out.stdout
