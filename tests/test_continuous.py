"""Continuous actions end to end: specs, rescaling, environments, SAC and D4PG."""

from __future__ import annotations

import csv
import dataclasses
import re

import dm_env
import gymnasium
import numpy as np
import pytest
import tensorflow as tf
import tree
from dm_env import specs

from builders.d4pg import D4PGBuilder
from builders.sac import SACBuilder
from builders.vtrace import VTraceBuilder
from launch.backends.inprocess import run_inprocess
from launch.commands import cli
from launch.experiment import Experiment
from seed_agents.agents.d4pg.config import D4PGConfig
from seed_agents.agents.d4pg.learning import D4PGLearner
from seed_agents.agents.d4pg.networks import D4PGNetworks
from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.sac.learning import SACLearner
from seed_agents.agents.sac.networks import SACNetworks, tanh_log_det_jacobian
from seed_agents.envs import make_environment
from seed_agents.envs.action_repeat import ActionRepeat
from seed_agents.envs.action_scaling import CanonicalActions
from seed_agents.losses.distributional import categorical_projection
from seed_agents.specs import EnvironmentSpec, check_action_spec, make_environment_spec
from tests.bandits import bandit_dataset

SMALL_SAC = SACConfig(actor_hidden_sizes=(32, 32), critic_hidden_sizes=(32, 32), batch_size=16,
                      min_replay_size=64, samples_per_insert=4.0, replay_size=10_000)
SMALL_D4PG = D4PGConfig(actor_hidden_sizes=(32, 32), critic_hidden_sizes=(32, 32),
                        batch_size=16, min_replay_size=64, samples_per_insert=4.0,
                        replay_size=10_000, num_atoms=11, v_min=-10.0, v_max=10.0)


# --- action specs and rescaling -------------------------------------------------------


class _Env(dm_env.Environment):
    """A one-state environment with a given action spec; reward = -|a - 0.25|^2."""

    def __init__(self, action_spec: specs.Array):
        self._spec = action_spec

    def reset(self):
        return dm_env.restart(np.zeros(2, np.float32))

    def step(self, action):
        reward = -float(np.sum(np.square(np.asarray(action, np.float64) - 0.25)))
        return dm_env.termination(np.float32(reward), np.zeros(2, np.float32))

    def observation_spec(self):
        return specs.Array((2,), np.float32)

    def action_spec(self):
        return self._spec


def test_only_discrete_and_bounded_float_vector_actions_are_supported():
    check_action_spec(specs.DiscreteArray(3, dtype=np.int32))
    check_action_spec(specs.BoundedArray((2,), np.float32, -1.0, 1.0))
    for bad, why in [
        (specs.Array((2,), np.float32), "neither a DiscreteArray nor a BoundedArray"),
        (specs.BoundedArray((2,), np.float64, -1.0, 1.0), "not float32"),
        (specs.BoundedArray((2, 2), np.float32, -1.0, 1.0), "not (d,)"),
        (specs.BoundedArray((2,), np.float32, -np.inf, 1.0), "not finite"),
        (specs.BoundedArray((2,), np.int32, 0, 3), "not float32"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)) as error:
            make_environment_spec(_Env(bad))
        assert repr(bad) in str(error.value)  # the message names the spec


def test_canonical_actions_rescale_clip_and_count():
    inner = specs.BoundedArray((2,), np.float64, [-2.0, 0.0], [2.0, 10.0])
    seen = []

    class Recording(_Env):
        def step(self, action):
            seen.append(action)
            return super().step(action)

    env = CanonicalActions(Recording(inner))
    spec = env.action_spec()
    assert spec.dtype == np.float32 and spec.shape == (2,)
    assert np.all(spec.minimum == -1.0) and np.all(spec.maximum == 1.0)
    env.step(np.array([-1.0, 1.0], np.float32))
    env.step(np.array([0.0, 0.0], np.float32))
    assert env.bad_actions == 0
    env.step(np.array([3.0, np.nan], np.float32))  # clipped to 1, NaN to the middle
    env.step(np.array([-7.0, 0.5], np.float32))
    np.testing.assert_allclose(seen, [[-2.0, 10.0], [0.0, 5.0], [2.0, 5.0], [-2.0, 7.5]])
    assert all(a.dtype == np.float64 for a in seen) and env.bad_actions == 2
    with pytest.raises(ValueError, match="finite"):
        CanonicalActions(_Env(specs.BoundedArray((1,), np.float32, -np.inf, 1.0)))


def test_gym_pendulum_acts_in_minus_one_to_one_on_its_own_torque_range():
    env = make_environment("gym:Pendulum-v1", seed=3)
    raw = gymnasium.make("Pendulum-v1")
    raw.reset(seed=3)
    env.reset()
    assert make_environment_spec(env).action_size == 1
    for action in (1.0, -0.5):  # Pendulum's torque range is [-2, 2]
        step = env.step(np.array([action], np.float32))
        observation, reward, *_ = raw.step(np.array([2.0 * action], np.float32))
        np.testing.assert_allclose(step.observation, observation, rtol=1e-6)
        assert step.reward == pytest.approx(reward, rel=1e-5)


def test_control_suite_walker_has_flat_float32_observations_and_a_truncating_time_limit():
    env = make_environment("dmc:walker-walk", seed=0)
    spec = make_environment_spec(env)
    assert spec.observations.shape == (24,) and spec.observations.dtype == np.float32
    assert spec.action_size == 6
    step = env.reset()
    assert step.observation.dtype == np.float32 and step.observation.shape == (24,)
    steps = 0
    while not step.last():
        step = env.step(np.zeros(6, np.float32))
        steps += 1
    assert steps == 1000 and step.discount == 1.0  # cut by time, not a failure
    env.close()
    with pytest.raises(ValueError, match="walker's tasks: walker-run, walker-stand"):
        make_environment("dmc:walker-fly")
    with pytest.raises(ValueError, match="dmc:<domain>-<task>"):
        make_environment("dmc:walker")


def test_an_action_repeat_plays_the_same_episode_in_fewer_agent_steps():
    """`dmc:walker-walk,repeat=2`: each step holds the action for two control steps, its
    reward their sum, so an episode is 500 steps and its return the same as 1,000 steps
    of the same actions without the repeat."""
    actions = np.random.default_rng(0).uniform(-1, 1, (1000, 6)).astype(np.float32)
    plain = make_environment("dmc:walker-walk", seed=4)
    plain.reset()
    plain_return = sum(float(plain.step(a).reward) for a in np.repeat(actions[::2], 2, 0))
    repeated = make_environment("dmc:walker-walk,repeat=2", seed=4)
    step, steps, total = repeated.reset(), 0, 0.0
    while not step.last():
        step = repeated.step(actions[2 * steps])
        steps, total = steps + 1, total + float(step.reward)
    assert steps == 500 and step.discount == 1.0 and step.reward.dtype == np.float32
    assert total == pytest.approx(plain_return, rel=1e-5) and plain_return > 0.0
    assert repeated.step(actions[0]).first()  # after the end, a reset as before
    plain.close()
    repeated.close()
    for bad, match in (("repeat=0", "repeat must be >= 1"), ("repeat=x", "invalid literal"),
                       ("rep=2", "Bad option 'rep=2'")):
        with pytest.raises(ValueError, match=match):
            make_environment(f"dmc:walker-walk,{bad}")


class _EndsAtStep(dm_env.Environment):
    """Rewards 1, 2, 3, ... with discount 0.5 each step, ending (discount 0) at `end`."""

    def __init__(self, end: int):
        self._end, self._t = end, 0

    def reset(self):
        self._t = 0
        return dm_env.restart(np.zeros(1, np.float32))

    def step(self, action):
        self._t += 1
        reward = np.float32(self._t)
        if self._t == self._end:
            return dm_env.termination(reward, np.zeros(1, np.float32))
        return dm_env.transition(reward, np.zeros(1, np.float32), np.float32(0.5))

    def observation_spec(self):
        return specs.Array((1,), np.float32)

    def action_spec(self):
        return specs.Array((), np.int32)


def test_an_action_repeat_discounts_within_its_step_and_stops_at_a_terminal_one():
    env = ActionRepeat(_EndsAtStep(end=5), 3)
    env.reset()
    first = env.step(0)  # rewards 1, 2, 3 with discounts 0.5 each: 1 + 0.5*2 + 0.25*3
    assert first.reward == pytest.approx(2.75) and first.discount == pytest.approx(0.125)
    last = env.step(0)  # steps 4 and 5 (terminal): the third repeat is not played
    assert last.last() and last.reward == pytest.approx(4 + 0.5 * 5) and last.discount == 0.0
    with pytest.raises(ValueError, match="repeats >= 1"):
        ActionRepeat(_EndsAtStep(end=5), 0)


@pytest.mark.parametrize("agent", ["sac", "d4pg", "td3"])
def test_layer_norm_mlp_gives_every_network_acmes_layers_and_targets_copy_them(agent):
    """`layer_norm_mlp=True` (an `ActorCriticConfig` field, as MPO's) puts a LayerNorm after
    the first hidden layer of the actor and of every critic, online and target, and the
    targets start as copies of the online networks, LayerNorm's scale and offset included."""
    from launch.commands.agents import builtin_agents

    builder_class, config_class = builtin_agents()[agent]
    config = config_class(actor_hidden_sizes=(16, 16), critic_hidden_sizes=(16, 16),
                          layer_norm_mlp=True)
    spec = make_environment_spec(make_environment("gym:Pendulum-v1", seed=0))
    networks = builder_class(config).make_networks(spec)
    norms = [module for module in networks.submodules
             if isinstance(module, tf.keras.layers.LayerNormalization)]
    # SAC: actor + 2 critics + 2 target critics; D4PG: actor, critic and their targets;
    # TD3: actor, 2 critics and their targets.
    assert len(norms) == {"sac": 5, "d4pg": 4, "td3": 6}[agent]
    names = sorted(v.name for v in networks.variables if "norm" in v.name)
    targets = [n for n in names if "target" in n]
    assert targets and len(targets) < len(names)
    by_name = {v.name: v.numpy() for v in networks.variables}
    for name in targets:
        online = name.replace("target_", "")
        np.testing.assert_array_equal(by_name[name], by_name[online])
    plain = builder_class(dataclasses.replace(config, layer_norm_mlp=False)).make_networks(spec)
    assert not any("norm" in v.name for v in plain.variables)
    with pytest.raises(ValueError, match="layer_norm_mlp must be True or False"):
        config_class(layer_norm_mlp="yes")


def test_agents_refuse_environments_they_cannot_act_in(capsys):
    with pytest.raises(ValueError, match="continuous actions in \\[-1, 1\\]"):
        Experiment(SACBuilder(SMALL_SAC), "gym:CartPole-v1").environment_spec()
    with pytest.raises(ValueError, match="discrete actions"):
        Experiment(VTraceBuilder(), "gym:Pendulum-v1").environment_spec()
    # A bounded float vector in the environment's own range is rescaled at the edge ...
    odd = specs.BoundedArray((1,), np.float64, 0.0, 5.0)
    actions = Experiment(D4PGBuilder(SMALL_D4PG), lambda seed: _Env(odd)).environment_spec().actions
    assert actions.dtype == np.float32 and actions.shape == (1,)
    assert np.all(actions.minimum == -1.0) and np.all(actions.maximum == 1.0)
    # ... while actions with no bounds to rescale from stay refused, naming the spec.
    unbounded = specs.Array((1,), np.float32)
    with pytest.raises(ValueError, match="neither a DiscreteArray nor a BoundedArray"):
        Experiment(D4PGBuilder(SMALL_D4PG), lambda seed: _Env(unbounded)).environment_spec()
    assert cli.main(["train", "--agent", "sac", "--env", "gym:CartPole-v1"]) == 2
    assert "DiscreteArray" in capsys.readouterr().err


# --- the math ---------------------------------------------------------------------------


def test_tanh_gaussian_log_probability_is_the_squashed_density():
    networks = SACNetworks((3,), 2, (8,), (8,))
    observation = tf.constant(np.random.default_rng(0).normal(size=(5, 3)), tf.float32)
    noise = tf.constant(np.random.default_rng(1).normal(size=(5, 2)), tf.float32)
    action, log_prob = networks.sample(observation, noise)
    mean, log_std = (t.numpy().astype(np.float64) for t in networks.policy(observation))
    u = mean + np.exp(log_std) * noise.numpy()
    gaussian = np.sum(-0.5 * noise.numpy() ** 2 - log_std - 0.5 * np.log(2 * np.pi), -1)
    expected = gaussian - np.sum(np.log(1.0 - np.tanh(u) ** 2), -1)
    np.testing.assert_allclose(log_prob.numpy(), expected, rtol=1e-4, atol=1e-4)
    # The action is float32 in [-1, 1]: an absolute tolerance of a few float32 ulps, since
    # a relative one alone fails (about 1 draw in 100 of the random weights) where u is
    # near 0 and tanh(u) is computed from float32 inputs the float64 reference rounds apart.
    np.testing.assert_allclose(action.numpy(), np.tanh(u), rtol=1e-5, atol=1e-6)
    # Where tanh rounds to 1 in float32, the stable form stays finite.
    far = tanh_log_det_jacobian(tf.constant([[30.0, -30.0]]))
    assert np.isfinite(far.numpy()).all()
    assert far.numpy()[0] == pytest.approx(2 * (2 * np.log(2) - 60.0), rel=1e-4)


def _project_reference(p, reward, discount, support):
    """C51's projection written out atom by atom."""
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (len(support) - 1)
    out = np.zeros_like(p)
    for b in range(p.shape[0]):
        for j, z in enumerate(support):
            position = (np.clip(reward[b] + discount[b] * z, v_min, v_max) - v_min) / dz
            low, high = int(np.floor(position)), int(np.ceil(position))
            if low == high:
                out[b, low] += p[b, j]
            else:
                out[b, low] += p[b, j] * (high - position)
                out[b, high] += p[b, j] * (position - low)
    return out


def test_categorical_projection_matches_the_atom_by_atom_reference():
    rng = np.random.default_rng(0)
    support = np.linspace(-10.0, 10.0, 11)
    p = rng.dirichlet(np.ones(11), size=6)
    reward = np.array([0.0, 1.3, -25.0, 25.0, 2.0, -0.7])  # two push mass off the ends
    discount = np.array([1.0, 0.9, 0.99, 0.5, 0.0, 0.97])
    got = categorical_projection(tf.constant(p, tf.float32), tf.constant(reward, tf.float32),
                                 tf.constant(discount, tf.float32),
                                 tf.constant(support, tf.float32)).numpy()
    np.testing.assert_allclose(got, _project_reference(p, reward, discount, support),
                               atol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)  # no mass lost
    assert got[4, 6] == pytest.approx(1.0, abs=1e-5)  # discount 0: all mass at r = 2



def test_sac_learner_finds_the_best_action_of_a_bandit():
    tf.random.set_seed(0)  # the networks' initial weights
    config = dataclasses.replace(SMALL_SAC, learning_rate=3e-3, batch_size=64)
    networks = SACNetworks((2,), 2, (32, 32), (32, 32))
    learner = SACLearner(networks, bandit_dataset(), config, seed=0)
    for _ in range(600):
        metrics = learner.step()
    best = networks.mode(tf.zeros([1, 2])).numpy()[0]
    np.testing.assert_allclose(best, [0.25, 0.25], atol=0.15)
    assert set(metrics) >= {"critic_loss", "actor_loss", "temperature", "entropy"}
    assert metrics["temperature"] < 1.0  # the entropy target pulled alpha down
    assert learner.num_steps == 600


def test_d4pg_learner_finds_the_best_action_of_a_bandit():
    tf.random.set_seed(0)  # the networks' initial weights: unseeded, one run in many missed
    config = dataclasses.replace(SMALL_D4PG, learning_rate=3e-3, batch_size=64,
                                 v_min=-10.0, v_max=1.0)
    networks = D4PGNetworks((2,), 2, (32, 32), (32, 32), 11, -10.0, 1.0)
    learner = D4PGLearner(networks, bandit_dataset(), config)
    # 1,000 steps: at 600 one dimension was still at 0.07-0.13 in some runs (seeds 0-3 by
    # hand: within 0.04 of 0.25 by 1,000).
    for _ in range(1_000):
        learner.step()
    best = networks.policy(tf.zeros([1, 2])).numpy()[0]
    np.testing.assert_allclose(best, [0.25, 0.25], atol=0.15)


def test_d4pg_config_refuses_a_support_without_two_atoms_on_a_real_interval():
    # The same check as MPO's categorical critic and `CategoricalCritic` (check_support).
    for bad in ({"num_atoms": 1}, {"v_min": 1.0, "v_max": 1.0}, {"v_min": 2.0, "v_max": -2.0}):
        with pytest.raises(ValueError, match="categorical support needs num_atoms >= 2 and "
                           "v_min < v_max"):
            D4PGConfig(**bad)
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        D4PGConfig(sigma=-0.1)
    assert D4PGConfig(num_atoms=2, v_min=-1.0, v_max=1.0).num_atoms == 2


# --- whole runs -------------------------------------------------------------------------


def _rows(path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("runners", [1, 4])
def test_rate_limiter_holds_samples_per_insert_within_its_buffer(tmp_path, runners):
    config = dataclasses.replace(SMALL_SAC, num_eval_envs=0)
    experiment = Experiment(SACBuilder(config), "gym:Pendulum-v1", num_runners=runners,
                            envs_per_runner=2, max_env_steps=1_500, logdir=str(tmp_path),
                            checkpoint_every_s=None)
    result = run_inprocess(experiment)
    assert "budget" in result.stop_reason and result.learner_steps > 0
    rows = [r for r in _rows(tmp_path / "learner.csv")
            if r["replay_inserts"] not in ("", "nan") and float(r["replay_inserts"]) > 0]
    assert rows, "the learner logged no samples-per-insert reading"
    spi, eb = config.samples_per_insert, config.error_buffer
    for row in rows:
        inserts, samples = float(row["replay_inserts"]), float(row["replay_samples"])
        # Reverb's invariant: spi * inserts - samples stays within eb of spi * min_size
        # (one batch and one insert of slack: a reading can fall between the two halves
        # of a sample or an insert).
        diff = spi * inserts - samples
        assert abs(diff - spi * config.min_replay_size) <= eb + config.batch_size + spi
    last = float(rows[-1]["samples_per_insert"])
    assert last == pytest.approx(float(rows[-1]["replay_samples"])
                                 / float(rows[-1]["replay_inserts"]))


@pytest.mark.parametrize("builder", [SACBuilder(SMALL_SAC), D4PGBuilder(SMALL_D4PG)],
                         ids=["sac", "d4pg"])
def test_continuous_agents_train_in_process_with_evaluation_environments(builder):
    experiment = Experiment(builder, "gym:Pendulum-v1", num_runners=1, envs_per_runner=3,
                            max_env_steps=600)
    result = run_inprocess(experiment)
    assert "budget" in result.stop_reason
    assert result.learner_steps > 0 and result.env_steps >= 600
    assert result.eval_mean_return is not None  # the deterministic environment's episodes


def test_sac_trains_as_local_processes_from_the_command_line(tmp_path):
    """The issue's command (`train --agent sac --backend local_mp`) on a small task: runner
    processes send float actions over gRPC (wire v2) and the learner trains on them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SEED_AGENTS_TF_THREADS="1",
               PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-m", "launch.commands.cli", "train", "--agent", "sac", "--env",
         "gym:Pendulum-v1", "--backend", "local_mp", "--steps", "800", "--logdir",
         str(tmp_path / "run"), "--log-every-s", "1",
         *(f"--set={o}" for o in ("actor_hidden_sizes=32,32", "critic_hidden_sizes=32,32",
                                  "batch_size=16", "min_replay_size=64",
                                  "samples_per_insert=4", "replay_size=10000"))],
        capture_output=True, text=True, env=env, cwd=root, timeout=600)
    # stdout too: a slow stop names each node's exit time there
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "train env_steps=" in out.stderr + out.stdout  # progress shown
    learner_steps = int(out.stdout.split("learner steps:")[1].split()[0].replace(",", ""))
    assert learner_steps > 0
    rows = _rows(tmp_path / "run" / "learner.csv")
    assert rows and all(np.isfinite(float(r["critic_loss"])) for r in rows)


class _GaussianPolicy:
    """A custom agent's policy: Gaussian actions, its log-probability in the extras."""

    num_evaluation_envs = 0
    state_spec = ()
    extras_spec = {"log_prob": specs.Array((), np.float32)}

    def __init__(self, size: int):
        self._size = size
        self._rng = np.random.default_rng(0)

    def initial_state(self, batch_size):
        return ()

    def step(self, observation, prev_action, state, env_ids=None):
        assert prev_action.dtype == np.float32 and prev_action.shape[1:] == (self._size,)
        action = np.clip(self._rng.normal(size=(len(observation), self._size)), -1, 1)
        return action.astype(np.float32), {"log_prob": np.zeros(len(observation),
                                                                 np.float32)}, ()


def test_a_custom_agent_writes_unrolls_of_float_actions():
    from builders.base import AgentBuilder
    from seed_agents import core
    from seed_agents.learning.batches import Batches
    from seed_agents.replay import make_dataset, queue_table, unroll_signature

    class Counting(core.Learner):
        def __init__(self, dataset, batch_size):
            self.batches = Batches(dataset, batch_size)
            self.seen = []

        def step(self):
            sample = self.batches.next()
            if sample is not None:
                self.seen.append(tree.map_structure(lambda x: x.numpy(), sample.data))
            return {}

        def get_variables(self, names):
            return [[] for _ in names]

    @dataclasses.dataclass
    class CustomBuilder(AgentBuilder):
        unroll_length: int = 5

        def make_networks(self, env_spec):
            return tf.Module()

        def make_policy(self, networks, env_spec, evaluation=False, seed=None, num_envs=1):
            return _GaussianPolicy(env_spec.action_size)

        def make_replay_tables(self, env_spec, policy):
            signature = unroll_signature(env_spec, self.unroll_length, policy.extras_spec)
            return [queue_table(self.table, 32, signature)]

        def make_learner(self, networks, replay_address, counter=None, logger=None):
            self.learner = Counting(make_dataset(replay_address, self.table, 2), 2)
            return self.learner

    builder = CustomBuilder()
    result = run_inprocess(Experiment(builder, "gym:Pendulum-v1", num_runners=1,
                                      envs_per_runner=2, max_env_steps=400))
    assert result.env_steps >= 400
    unroll = builder.learner.seen[0]
    assert unroll["action"].shape == (2, 6, 1) and unroll["action"].dtype == np.float32
    assert unroll["prev_action"].shape == (2, 6, 1)
    # The previous action of a row is the action of the row before it (within episodes).
    same = unroll["step_type"][:, 1:] != 0
    np.testing.assert_array_equal(unroll["prev_action"][:, 1:][same],
                                  unroll["action"][:, :-1][same])


def test_spec_of_a_continuous_task_reaches_the_agent_unchanged():
    spec = Experiment(SACBuilder(SMALL_SAC), "dmc:cheetah-run").environment_spec()
    assert isinstance(spec, EnvironmentSpec) and spec.action_size == 6
    assert spec.observations.shape == (17,)


def test_a_runner_counts_the_bad_actions_its_environments_clipped():
    from seed_agents.envs import environment_factory
    from seed_agents.inference.runner import EnvRunner, runner_rates

    runner = EnvRunner(environment_factory("gym:Pendulum-v1"), num_envs=2)
    runner.run(lambda batch: np.array([[5.0], [np.nan]], np.float32), max_steps=3)
    runner.run(lambda batch: np.array([[0.5], [-1.0]], np.float32), max_steps=2)
    assert runner.bad_actions == 6  # 2 environments x 3 steps, then none
    assert runner_rates({"time": 0.0}, {**runner.figures(), "time": 1.0})["bad_actions"] == 6
    runner.close()


def _learn_continuous():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "learn_continuous", root / "benchmarks" / "learn_continuous.py")
    learn_continuous = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learn_continuous)
    return learn_continuous


def test_learn_continuous_counts_environment_steps_through_an_action_repeat():
    """`--steps` is a budget of environment steps, as published budgets are: with
    `repeat=2` the agent takes half of them, and the anchors of the plain task apply."""
    learn_continuous = _learn_continuous()
    args = learn_continuous.parse_args(["--agents", "mpo", "--env", "dmc:walker-walk,repeat=2",
                                        "--steps", "100001"])
    assert learn_continuous.action_repeat("mpo", args) == 2
    assert learn_continuous.agent_steps("mpo", args) == 50_001  # rounded up: the whole budget
    assert learn_continuous.anchor_task("mpo", args) == "dmc:walker-walk"
    plain = learn_continuous.parse_args(["--agents", "mpo", "--env", "dmc:walker-walk"])
    assert learn_continuous.agent_steps("mpo", plain) == 100_000


def test_learn_continuous_spells_out_a_preset_before_the_set_values(capsys):
    """`--preset mpo:dmpo_large` is the preset's values as `--set` would give them, a later
    `--set` of the same key winning: a seed run either way has the same settings (so
    `--results-dir` reuses it), and an unknown preset is refused naming the known ones."""
    from seed_agents.agents.mpo.presets import DMPO_LARGE

    learn_continuous = _learn_continuous()
    task = ["--agents", "mpo", "--env", "dmc:finger-spin"]
    args = learn_continuous.parse_args([*task, "--preset", "mpo:dmpo_large",
                                        "--set", "mpo:n_step=5"])
    assert "mpo:critic_hidden_sizes=512,512,256" in args.overrides
    assert "mpo:n_step=5" in args.overrides and "mpo:n_step=4" not in args.overrides
    spelled = [arg for item in DMPO_LARGE if not item.startswith("n_step=")
               for arg in ("--set", f"mpo:{item}")]
    by_set = learn_continuous.parse_args([*task, *spelled, "--set", "mpo:n_step=5"])
    assert (learn_continuous.seed_settings("mpo", args)
            == learn_continuous.seed_settings("mpo", by_set))
    for wrong in ("mpo:dmpo_huge", "dmpo_large"):
        with pytest.raises(SystemExit):
            learn_continuous.parse_args([*task, "--preset", wrong])
        assert "mpo:dmpo_large" in capsys.readouterr().err


def test_learn_continuous_runs_are_the_builders_own_and_load_back(tmp_path, capsys):
    """`benchmarks/learn_continuous.py --runs-dir` keeps the builder's networks (run.json
    names no custom factory), evaluates the final checkpoint, and `seed-agents eval`
    loads the run."""
    import json

    learn_continuous = _learn_continuous()
    args = learn_continuous.parse_args([
        "--agents", "td3", "--env", "gym:Pendulum-v1", "--steps", "400", "--seeds", "1",
        "--envs", "2", "--eval-episodes", "1", "--runs-dir", str(tmp_path),
        "--set", "td3:actor_hidden_sizes=(16,)", "--set", "td3:critic_hidden_sizes=(16,)",
        "--set", "td3:batch_size=16", "--set", "td3:min_replay_size=64",
        "--set", "td3:samples_per_insert=2.0"])
    out = learn_continuous.run_seed("td3", 0, args, threads=1)
    assert out["env_steps"] >= 400 and out["learner_steps"] > 0
    assert -2000.0 < out["eval_return"] <= 0.0  # Pendulum's returns: one 200-step episode
    logdir = tmp_path / "td3_gym_Pendulum-v1_seed0"
    assert json.loads((logdir / "run.json").read_text())["network_factory"] is None
    assert cli.main(["eval", "--logdir", str(logdir), "--episodes", "1"]) == 0
    assert "return: mean" in capsys.readouterr().out


def test_ctrl_c_stops_learn_continuous_with_its_checkpoints_and_says_how_to_go_on(tmp_path):
    """SIGINT (Ctrl-C, `kill -INT`) stops `benchmarks/learn_continuous.py` through each
    run's cleanup: exit status 130, a line saying how to continue, no traceback, and the
    learner's checkpoint in each run directory. With `--parallel 2`, where the seeds run in
    processes of their own and the signal reaches only the parent (as `kill` sends it):
    the parent passes it on and waits for them (a `multiprocessing.Pool` killed them)."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from seed_agents.utils.checkpointing import has_learner_checkpoint, learner_directory
    from tests.run_logs import interrupt_when

    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen(
        [sys.executable, str(root / "benchmarks" / "learn_continuous.py"), "--agents", "td3",
         "--env", "gym:Pendulum-v1", "--steps", "10000000", "--seeds", "2", "--parallel",
         "2", "--envs", "2",
         "--runs-dir", str(tmp_path), "--set", "td3:actor_hidden_sizes=(16,)",
         "--set", "td3:critic_hidden_sizes=(16,)", "--set", "td3:batch_size=16",
         "--set", "td3:min_replay_size=64", "--set", "td3:samples_per_insert=2.0"],
        cwd=root, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # its seeds' processes share its group: see the end
    logdirs = [tmp_path / f"td3_gym_Pendulum-v1_seed{seed}" for seed in (0, 1)]

    def logged_rows(path: Path) -> int:
        return max(len(path.read_text().splitlines()) - 1, 0) if path.exists() else 0

    def training() -> bool:
        # Each learner has logged a step (its file exists, empty, from the start) and each
        # run its first progress row: a signal during a learner's first step, which traces
        # its graph (over 30 s once, in a loaded CI), would outlast the stop's wait for the
        # learner, and the test would see a stop's bound, not its cleanup.
        return all(logged_rows(logdir / "learner.csv") >= 1
                   and logged_rows(logdir / "train.csv") >= 1 for logdir in logdirs)

    try:
        output = interrupt_when(process, training)
    finally:
        # interrupt_when kills the parent alone if the test fails; its seeds' processes
        # would outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, output[-2000:]
    assert f"continues each unfinished seed from its newest checkpoint in {tmp_path}" in output
    assert "Traceback" not in output
    for seed, logdir in enumerate(logdirs):
        assert re.search(rf"td3 seed {seed}: stopped at [\d,]+ of 10,000,000 env steps",
                         output), output
        assert has_learner_checkpoint(learner_directory(str(logdir)))
