"""MinAtar environments (`minatar:<game>` ids) and the MinAtar torso, on the real package."""

from __future__ import annotations

import os
import sys

import dm_env
import numpy as np
import pytest
import tensorflow as tf

from builders.r2d2 import R2D2Builder
from builders.vtrace import VTraceBuilder
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.envs import make_environment
from seed_agents.envs.minatar import MINATAR_GAMES, game_name, parse_minatar_id
from seed_agents.envs.registry import validate_environment_id
from seed_agents.envs.rendering import make_rendering_environment
from seed_agents.networks.torsos import TORSOS, check_torso_observation, embed
from seed_agents.specs import make_environment_spec

pytest.importorskip("minatar")  # the test extra installs it; a bare install has no games

# The package's minimal action sets and object planes, per game.
ACTIONS = {"asterix": 5, "breakout": 3, "freeway": 3, "seaquest": 6, "space_invaders": 4}
CHANNELS = {"asterix": 4, "breakout": 4, "freeway": 7, "seaquest": 10, "space_invaders": 6}


@pytest.mark.parametrize("game", MINATAR_GAMES)
def test_each_game_has_bool_grid_observations_and_its_minimal_actions(game):
    env = make_environment(f"minatar:{game}", seed=0)
    spec = env.observation_spec()
    assert spec.shape == (10, 10, CHANNELS[game]) and spec.dtype == np.bool_
    assert env.action_spec().num_values == ACTIONS[game]
    timestep = env.reset()
    assert timestep.first() and timestep.observation.dtype == np.bool_
    assert not timestep.observation.flags.writeable
    spec.validate(timestep.observation)
    timestep = env.step(0)
    assert timestep.mid() and timestep.reward.dtype == np.float32


def test_full_actions_gives_all_six():
    assert make_environment("minatar:breakout,full_actions=1").action_spec().num_values == 6


def test_spellings_of_a_game_and_an_unknown_game_names_the_five():
    assert game_name("SpaceInvaders") == game_name("space-invaders") == "space_invaders"
    with pytest.raises(ValueError, match="asterix, breakout, freeway, seaquest, space_invaders"):
        validate_environment_id("minatar:pong")
    with pytest.raises(ValueError, match="keys: sticky"):
        validate_environment_id("minatar:breakout,frameskip=4")
    with pytest.raises(ValueError, match="probability"):
        parse_minatar_id("breakout,sticky=1.5")


def _play(env_id: str, seed: int, steps: int) -> tuple[list[np.ndarray], list[float]]:
    env = make_environment(env_id, seed=seed)
    rng = np.random.default_rng(0)
    observations, rewards = [env.reset().observation], []
    for _ in range(steps):
        timestep = env.step(rng.integers(env.action_spec().num_values))
        observations.append(timestep.observation)
        rewards.append(float(timestep.reward or 0.0))
    return observations, rewards


def test_equal_seeds_and_actions_give_equal_episodes_and_other_seeds_differ():
    a, ra = _play("minatar:asterix", 3, 300)
    b, rb = _play("minatar:asterix", 3, 300)
    c, _ = _play("minatar:asterix", 4, 300)
    assert ra == rb and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_a_lost_game_is_terminal_and_the_cap_truncates_with_discount_one():
    env = make_environment("minatar:breakout,sticky=0", seed=0)
    env.reset()
    timestep = env.step(0)
    steps = 1
    while not timestep.last():  # standing still, the ball is missed within ~20 steps
        timestep = env.step(0)
        steps += 1
    assert timestep.discount == 0.0 and steps < 100
    assert env.step(0).first()  # auto-reset, as dm_env environments do

    capped = make_environment("minatar:freeway,max_steps=5", seed=0)
    capped.reset()
    kinds = [capped.step(1) for _ in range(5)]
    assert [t.step_type for t in kinds[:4]] == [dm_env.StepType.MID] * 4
    assert kinds[4].last() and kinds[4].discount == 1.0


def test_sticky_actions_repeat_the_previous_action():
    # Breakout's paddle starts at column 4; "left" (action 1) every step moves it to 0 in
    # 4 steps without sticky actions, and with sticky=1 the first action (no-op) repeats.
    def paddle_column(sticky: float) -> int:
        env = make_environment(f"minatar:breakout,sticky={sticky}", seed=0)
        env.reset()
        env.step(0)
        for _ in range(4):
            observation = env.step(1).observation
        return int(np.argmax(observation[9, :, 0]))

    assert paddle_column(0.0) == 0
    assert paddle_column(1.0) == 4


def test_render_draws_the_grid_for_eval_videos():
    rendering = make_rendering_environment("minatar:breakout", seed=0)
    rendering.environment.reset()
    frame = rendering.frame()
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
    assert frame.max() > 0 and rendering.fps > 0


def test_a_minatar_id_without_the_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar", None)  # as if not installed
    with pytest.raises(ValueError, match=r"pip install -e '\.\[minatar\]'"):
        validate_environment_id("minatar:breakout")
    with pytest.raises(ImportError, match="optional extra"):
        make_environment("minatar:breakout")


def test_minatar_torso_is_the_papers_network():
    layers = TORSOS["minatar"]()
    grid = tf.constant(np.random.default_rng(0).integers(0, 2, (2, 10, 10, 4)).astype(bool))
    features = embed(layers, grid)
    assert features.shape == (2, 8 * 8 * 16)
    network = PolicyValueNetwork(3, (10, 10, 4), (128,), torso="minatar",
                                 separate_value_torso=False)
    kernel_shapes = sorted(tuple(v.shape) for v in network.trainable_variables)
    assert (3, 3, 4, 16) in kernel_shapes and (1024, 128) in kernel_shapes


def test_bool_planes_are_read_as_zero_or_one_and_pixels_as_intensities():
    layers = TORSOS["minatar"]()
    ones = np.ones((1, 10, 10, 4))
    from_bool = embed(layers, tf.constant(ones.astype(bool)))
    from_float = embed(layers, tf.constant(ones.astype(np.float32)))  # floats: / 255
    from_uint8 = embed(layers, tf.constant((ones * 255).astype(np.uint8)))
    np.testing.assert_allclose(from_bool.numpy(), from_uint8.numpy(), rtol=1e-6)
    assert not np.allclose(from_bool.numpy(), from_float.numpy())


@pytest.mark.parametrize("builder", [VTraceBuilder(VTraceConfig(torso="minatar")),
                                     R2D2Builder(R2D2Config(torso="minatar"))])
def test_minatar_torso_on_other_observations_is_refused_before_anything_starts(builder):
    spec = make_environment_spec(make_environment("gym:CartPole-v1"))
    with pytest.raises(ValueError, match=r"torso=minatar reads MinAtar's 10x10xC grids.*\[4\]"):
        builder.check_env_spec(spec)
    builder.check_env_spec(make_environment_spec(make_environment("minatar:seaquest")))
    with pytest.raises(ValueError, match="torso=nature_cnn reads"):
        check_torso_observation("nature_cnn", (4,))


def _preset_experiment(agent: str, *extra: str):
    from launch.commands.cli import build_parser, make_experiment

    return make_experiment(build_parser().parse_args(
        ["train", "--agent", agent, "--env", "minatar:breakout", "--preset", "minatar",
         *extra]))


@pytest.mark.parametrize("agent", ["vtrace", "r2d2"])
def test_each_agent_has_a_minatar_preset_with_the_papers_network(agent):
    config = _preset_experiment(agent, "--set", "batch_size=16").builder.config
    assert config.torso == "minatar" and config.hidden_sizes == (128,)
    assert config.batch_size == 16  # --set after the preset wins


@pytest.mark.parametrize("agent", ["vtrace", "r2d2"])
def test_agents_learn_from_minatar_planes_through_central_inference(agent, tmp_path):
    import io

    from launch.backends.inprocess import run_inprocess

    small = {"vtrace": ["--set", "batch_size=4", "--set", "queue_size=8",
                        "--set", "unroll_length=8"],
             "r2d2": ["--set", "min_replay_size=8", "--set", "replay_size=64",
                      "--set", "num_eval_envs=1"]}[agent]
    experiment = _preset_experiment(
        agent, "--runners", "1", "--envs-per-runner", "4", "--steps", "1500",
        "--logdir", str(tmp_path), "--checkpoint-every-s", "0", *small)
    result = run_inprocess(experiment, stream=io.StringIO())
    assert "budget" in result.stop_reason
    assert result.learner_steps > 0 and result.episodes > 0


def _learn_minatar(*args: str):
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "learn_minatar.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, timeout=600, cwd=script.parents[1])


def test_learn_minatar_refuses_a_results_dir_of_other_settings_and_unknown_games(tmp_path):
    import json

    (tmp_path / "vtrace_breakout_seed0.json").write_text(json.dumps(
        {"settings": {"agent": "vtrace", "frames": 123}, "result": {}}))
    refused = _learn_minatar("--games", "breakout", "--seeds", "1", "--frames", "5000",
                             "--results-dir", str(tmp_path))
    assert refused.returncode != 0
    assert "was made with settings" in refused.stderr and "runs" not in os.listdir(tmp_path)
    unknown = _learn_minatar("--games", "breakout,pong", "--results-dir", str(tmp_path))
    assert unknown.returncode == 2 and "space_invaders" in unknown.stderr


def _benchmark_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "learn_minatar.py"
    spec = importlib.util.spec_from_file_location("learn_minatar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_learn_minatar_anchors_cover_the_default_games_with_a_source_and_budget():
    bench = _benchmark_module()
    for agent in bench.AGENTS:
        assert bench.ANCHORS[agent], agent
        for anchor in bench.ANCHORS[agent]:
            assert {"name", "algorithm", "budget", "source", "scores"} <= set(anchor)
            assert set(anchor["scores"]) <= set(MINATAR_GAMES)
        for game in bench.GAMES:  # the first anchor gives the ratio: it must know each game
            assert game in bench.ANCHORS[agent][0]["scores"]
            assert all(a["score"] > 0 for a in bench.anchors_for(agent, game))
    assert bench.default_frames("r2d2") == 5_000_000
    assert bench.default_frames("vtrace") == max(a["budget"] for a in bench.ANCHORS["vtrace"])


def test_learn_minatar_reads_budgets_and_half_scores_off_a_curve():
    bench = _benchmark_module()
    curve = [(1_000, 50, 1.0), (2_000, 100, 4.0), (3_000, 150, 6.0), (4_000, 200, 5.0)]
    final = (4_000, 5.0)
    assert bench.return_at(curve, 2_500, final) == 4.0  # the last row at or before
    assert bench.return_at(curve, 500, final) is None  # no row that early
    assert bench.return_at(curve, 10_000, final) == 5.0  # a shorter run: its final figure
    assert bench.frames_to(curve, 5.0) == 3_000 and bench.frames_to(curve, 7.0) is None
    assert bench.frames_to(curve, 1.0) == 2_000  # a mean over fewer than 100 episodes: no
