"""R2D2: value rescaling, n-step double-Q targets, sequences, priorities, and the agent
running under every backend."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree
from dm_env import specs

from builders.r2d2 import R2D2Builder
from launch.backends.inprocess import run_inprocess
from launch.backends.local_mp import run_local_mp
from launch.experiment import Experiment
from seed_agents.agents.r2d2.acting import R2D2Policy, apex_epsilons
from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.r2d2.learning import sequence_priorities
from seed_agents.agents.r2d2.priorities import InitialPriority
from seed_agents.envs import make_environment
from seed_agents.inference.protocol import FIRST, LAST, MID
from seed_agents.inference.runner import EnvRunner
from seed_agents.inference.server import InferenceConfig
from seed_agents.losses.q_learning import (
    inverse_rescale,
    n_step_double_q_targets,
    np_inverse_rescale,
    np_n_step_q_targets,
    np_rescale,
    rescale,
)
from seed_agents.replay import UnrollAdder
from seed_agents.replay import unrolls as u
from seed_agents.specs import make_environment_spec
from seed_agents.utils.checkpointing import (
    latest_checkpoint_info,
    learner_directory,
    replay_metadata_path,
)

SMALL = R2D2Config(burn_in=2, trace_length=4, sequence_period=3, n_step=3, batch_size=4,
                   replay_size=200, min_replay_size=8, samples_per_insert=4.0,
                   num_eval_envs=1, hidden_sizes=(16,), lstm_size=8, head_hidden_size=8,
                   target_update_period=3)
FAKE = "fake:obs=3,actions=3,len=7,terminate=1"


# -- value rescaling ---------------------------------------------------------------------

X = np.array([-1e4, -100.0, -3.5, -1.0, -1e-3, 0.0, 1e-3, 1.0, 3.0, 100.0, 1e4])


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_value_rescaling_is_the_papers_h_and_its_exact_inverse(eps):
    paper = np.sign(X) * (np.sqrt(np.abs(X) + 1.0) - 1.0) + eps * X
    h = rescale(tf.constant(X), eps).numpy()
    np.testing.assert_allclose(h, paper, rtol=1e-12)
    np.testing.assert_allclose(np_rescale(X, eps), paper, rtol=1e-12)
    np.testing.assert_allclose(inverse_rescale(tf.constant(h), eps).numpy(), X, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_allclose(np_inverse_rescale(h, eps), X, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(rescale(inverse_rescale(tf.constant(X), eps), eps).numpy(), X,
                               rtol=1e-9, atol=1e-9)
    assert rescale(tf.constant(3.0, tf.float64), eps).numpy() == pytest.approx(1.0 + 3 * eps)


# -- n-step double-Q targets -------------------------------------------------------------


def loop_targets(q_online, q_target, rewards, discounts, step_type, n, eps):
    """The targets written as the definition reads, one (t, b) at a time."""
    horizon, batch = rewards.shape[0] - 1, rewards.shape[1]
    out = np.zeros((horizon, batch))
    for b in range(batch):
        for t in range(horizon):
            total, scale, end = 0.0, 1.0, t
            for k in range(1, n + 1):
                end = t + k
                total += scale * rewards[end, b]
                scale *= discounts[end, b]
                if step_type[end, b] == LAST or end == horizon:
                    break
            action = np.argmax(q_online[end, b])
            bootstrap = np_inverse_rescale(q_target[end, b, action], eps)
            out[t, b] = np_rescale(total + scale * bootstrap, eps)
    return out


def episodes_batch(rng, horizon=14, batch=4):
    """Step types with terminations (discount 0) and truncations (discount 1) inside."""
    step_type = np.full((horizon + 1, batch), MID)
    env_discount = np.ones((horizon + 1, batch))
    step_type[0] = FIRST
    for b in range(batch):
        t = 1
        while t < horizon:
            t += int(rng.integers(1, 5))
            if t > horizon:
                break
            step_type[t, b] = LAST
            env_discount[t, b] = float(rng.integers(2))  # 0: terminated, 1: truncated
            if t + 1 <= horizon:
                step_type[t + 1, b] = FIRST
            t += 1
    return step_type, env_discount


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_double_q_targets_match_the_loop_reference(n):
    rng = np.random.default_rng(n)
    step_type, env_discount = episodes_batch(rng)
    shape = step_type.shape
    assert (step_type == LAST).any() and (env_discount[step_type == LAST] == 0).any()
    q_online = rng.normal(size=(*shape, 3))
    q_target = rng.normal(size=(*shape, 3))
    rewards = rng.normal(size=shape)
    discounts = 0.9 * env_discount
    eps = 1e-3
    expected = loop_targets(q_online, q_target, rewards, discounts, step_type, n, eps)
    got = n_step_double_q_targets(
        tf.constant(q_online), tf.constant(q_target), tf.constant(rewards),
        tf.constant(discounts), tf.constant(step_type == LAST), n, eps,
    ).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    # With one network picking and valuing, the numpy version (initial priorities) agrees.
    for b in range(shape[1]):
        single = np_n_step_q_targets(q_online[:, b], rewards[:, b], discounts[:, b],
                                     step_type[:, b] == LAST, n, eps)
        np.testing.assert_allclose(
            single,
            loop_targets(q_online[:, b:b + 1], q_online[:, b:b + 1], rewards[:, b:b + 1],
                         discounts[:, b:b + 1], step_type[:, b:b + 1], n, eps)[:, 0],
            rtol=1e-9, atol=1e-9)


def test_a_terminal_step_does_not_bootstrap_and_the_next_episode_does_not_leak():
    # Rows: FIRST, MID, LAST (terminated, reward 1), FIRST (reward 100: next episode).
    step_type = np.array([[FIRST], [MID], [LAST], [FIRST], [MID]])
    rewards = np.array([[0.0], [1.0], [1.0], [100.0], [100.0]])
    discounts = np.array([[1.0], [1.0], [0.0], [1.0], [1.0]])
    q = np.full((5, 1, 2), 50.0)
    got = n_step_double_q_targets(tf.constant(q), tf.constant(q), tf.constant(rewards),
                                  tf.constant(discounts), tf.constant(step_type == LAST), 4,
                                  0.0).numpy()
    # Row 0: r1 + r2 and nothing after the termination; row 1: r2.
    np.testing.assert_allclose(got[:2, 0], np_rescale(np.array([2.0, 1.0]), 0.0))


def test_sequence_priority_mixes_max_and_mean_over_valid_steps():
    td = tf.constant([[1.0, -2.0], [-3.0, 0.5], [100.0, 0.5]])
    mask = tf.constant([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    got = sequence_priorities(td, mask, eta=0.9).numpy()
    np.testing.assert_allclose(got, [0.9 * 3 + 0.1 * 2, 0.9 * 2 + 0.1 * 1], rtol=1e-6)


# -- acting ------------------------------------------------------------------------------


def _network(env_id=FAKE, config=SMALL):
    spec = make_environment_spec(make_environment(env_id, 0))
    return R2D2Builder(config).make_networks(spec), spec


def test_apex_schedule_and_evaluation_environments():
    eps = apex_epsilons(8)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert np.all(np.diff(eps) < 0)
    np.testing.assert_allclose(apex_epsilons(5), [0.4 ** (1 + 7 * i / 4) for i in range(5)])
    network, spec = _network()
    policy = R2D2Policy(network, spec, num_envs=10, num_evaluation_envs=2, eval_epsilon=0.0)
    assert policy.num_evaluation_envs == 2
    np.testing.assert_allclose(policy.epsilons, np.r_[0.0, 0.0, apex_epsilons(8)], rtol=1e-6)
    with pytest.raises(ValueError, match="evaluation environments"):
        R2D2Policy(network, spec, num_envs=2, num_evaluation_envs=2)


def test_epsilon_zero_acts_greedily_and_epsilon_one_explores():
    network, spec = _network()
    policy = R2D2Policy(network, spec, num_envs=2, epsilon_base=1.0, epsilon_alpha=0.0,
                        num_evaluation_envs=1, eval_epsilon=0.0, seed=3)
    obs = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    state = policy.initial_state(200)
    prev = np.zeros(200, np.int32)
    greedy, extras, _ = policy.step(obs, prev, state, np.zeros(200, np.int64))
    np.testing.assert_array_equal(greedy, extras["q_values"].argmax(-1))
    explored, extras, _ = policy.step(obs, prev, state, np.ones(200, np.int64))
    assert 0.4 < np.mean(explored != extras["q_values"].argmax(-1)) < 0.9  # ~2/3 of 3 actions


# -- sequences ---------------------------------------------------------------------------


def test_sequences_overlap_by_period_and_store_the_state_of_their_first_row():
    sequences = []

    def keep(sequence):  # the adder hands out views of its buffers; a writer copies
        sequences.append(tree.map_structure(np.copy, sequence))

    adder = UnrollAdder(keep, num_slots=2, unroll_length=6,
                        row_spec={"x": specs.Array((), np.float32)},
                        state_spec=(specs.Array((1,), np.float32),), period=3)
    slots = np.array([0, 1])
    for t in range(16):
        rows = {"x": np.array([t, 100 + t], np.float32)}
        adder.add(slots, rows, (np.array([[1000 + t], [2000 + t]], np.float32),))
    # Sequences of 7 rows start every 3 rows: rows 0-6, 3-9, 6-12, 9-15, for both slots.
    starts = [int(s["x"][0]) for s in sequences]
    assert starts == [0, 100, 3, 103, 6, 106, 9, 109]
    for s in sequences:
        first = int(s["x"][0])
        np.testing.assert_array_equal(s["x"], np.arange(first, first + 7))
        # The state fed in with row 0 (1000 + t for slot 0, 2000 + t - 100 for slot 1).
        expected = 1000 + first if first < 100 else 2000 + first - 100
        assert s[u.START_STATE][0][0] == expected
    with pytest.raises(ValueError, match="period"):
        UnrollAdder(sequences.append, 1, 6, {"x": specs.Array((), np.float32)}, period=7)


class _Agent:
    """R2D2's replay, adder and inference server on the fake environment, for real."""

    def __init__(self, config=SMALL, num_envs=3):
        self.builder = R2D2Builder(config)
        self.network, self.spec = _network(config=config)
        self.policy = self.builder.make_policy(self.network, self.spec, seed=0,
                                               num_envs=num_envs)
        self.replay = reverb.Server(self.builder.make_replay_tables(self.spec, self.policy),
                                    port=None)
        self.client = self.replay.localhost_client()
        adder = self.builder.make_adder(self.client, num_envs, self.spec, self.policy)
        self.server = self.builder.make_inference_server(
            self.policy, self.spec, adder,
            InferenceConfig(max_envs=num_envs, max_batch_size=num_envs))
        self._adder = adder
        self.num_envs = num_envs

    def act(self, rounds: int) -> None:
        runner = EnvRunner(lambda seed: make_environment(FAKE, seed), self.num_envs, seed=1)
        self.server.connect("r", self.num_envs)
        runner.run(lambda batch: self.server.step("r", batch), max_steps=rounds)
        self.server.disconnect("r")
        runner.close()

    def items(self, num_samples: int = 120) -> dict[int, tuple[float, dict]]:
        # Sampling here counts against the rate limiter, as the learner's does: stay
        # within its error buffer (100 x samples_per_insert) or it blocks.
        size = self.client.server_info()[self.builder.table].current_size
        assert size > 0
        by_key = {}
        for sample in self.client.sample(self.builder.table, num_samples=num_samples,
                                         emit_timesteps=False,
                                         unpack_as_table_signature=True):
            by_key[int(sample.info.key)] = (float(sample.info.priority), sample.data)
        return by_key

    def close(self):
        # As a run stops them: the adder's stream closes while the replay is up.
        self.server.close()
        self._adder.close()
        self.replay.stop()


@pytest.fixture
def agent():
    agent = _Agent()
    yield agent
    agent.close()


def test_stored_start_states_replay_the_acting_q_values(agent):
    agent.act(rounds=60)
    items = agent.items()
    assert len(items) >= 8
    crossed = 0
    for _, data in items.values():
        first = data[u.STEP_TYPE] == FIRST
        crossed += bool(first[1:].any())
        q, _ = agent.network.unroll(
            tf.constant(data[u.OBSERVATION][:, None]), tf.constant(data[u.PREV_ACTION][:, None]),
            tf.constant(first[:, None]),
            tuple(tf.constant(s[None]) for s in data[u.START_STATE]),
        )
        # Same network, same stored state: the learner sees what the actor saw, also
        # across the episode boundaries inside a sequence.
        np.testing.assert_allclose(q.numpy()[:, 0], data[u.EXTRAS]["q_values"], atol=1e-5)
    assert crossed  # 7-step episodes: some sequences hold an episode start after row 0


def test_initial_priorities_come_from_the_acting_q_values(agent):
    agent.act(rounds=40)
    priority_of = InitialPriority(SMALL)
    for priority, data in agent.items().values():
        assert priority == pytest.approx(priority_of(data), rel=1e-5)
        assert priority > 0


def test_evaluation_environments_stay_out_of_replay_and_have_their_own_returns(agent):
    # SMALL keeps environment 0 of 3 for evaluation; fake episodes last 7 steps.
    agent.act(rounds=60)
    status = agent.server.status()
    assert status["eval_episodes"] >= 7 and status["episodes"] >= 14
    unrolls_written = agent._adder.unrolls_written
    # 2 training envs x 60 rows, a sequence of 7 rows every 3: ~2 x 18.
    assert 30 <= unrolls_written <= 40


def test_learner_steps_rewrite_the_sampled_priorities(agent):
    agent.act(rounds=60)
    before = {k: p for k, (p, _) in agent.items().items()}
    address = f"localhost:{agent.replay.port}"
    with contextlib.closing(agent.builder.make_learner(agent.network, address)) as learner:
        while not (metrics := learner.step()):
            pass
        assert np.isfinite(metrics["loss"])
        # The first step's priorities come from the network that acted (the target network is
        # still its copy), so they equal the initial ones: learner and adder agree on the math.
        after = {k: p for k, (p, _) in agent.items().items()}
        for key in before.keys() & after.keys():
            assert after[key] == pytest.approx(before[key], rel=1e-4)
        learner.step()
        while learner.num_steps < 6:
            learner.step()
        after = {k: p for k, (p, _) in agent.items().items()}
        changed = [k for k in before.keys() & after.keys()
                   if after[k] != pytest.approx(before[k], rel=1e-3)]
        assert changed
        # The target network only moves every target_update_period (3) steps.
        # (6 steps, a multiple of the target_update_period of 3: just copied.)
        for online, variable in zip(learner.network.variables, learner.target_network.variables,
                                    strict=True):
            np.testing.assert_array_equal(online.numpy(), variable.numpy())
        while learner.num_steps < 7:
            learner.step()
        assert any(not np.array_equal(online.numpy(), variable.numpy()) for online, variable in
                   zip(learner.network.variables, learner.target_network.variables, strict=True))


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="sequence_period"):
        R2D2Config(burn_in=2, trace_length=4, sequence_period=7)
    with pytest.raises(ValueError, match="min_replay_size"):
        R2D2Config(replay_size=10, min_replay_size=20)
    with pytest.raises(ValueError, match="priority_eta"):
        R2D2Config(priority_eta=1.5)
    assert R2D2Config(hidden_sizes=32).hidden_sizes == (32,)


# -- the agent under every backend --------------------------------------------------------


def _experiment(tmp_path, steps=3_000, **kwargs) -> Experiment:
    return Experiment(builder=R2D2Builder(SMALL), environment="gym:CartPole-v1",
                      num_runners=2, envs_per_runner=3, max_env_steps=steps,
                      logdir=str(tmp_path), log_every_s=0.5, max_wall_s=1800, **kwargs)


def test_r2d2_trains_in_process(tmp_path):
    result = run_inprocess(_experiment(tmp_path), stream=io.StringIO())
    assert "budget" in result.stop_reason and result.learner_steps > 0
    assert result.eval_mean_return is not None


def test_r2d2_trains_as_local_processes(tmp_path):
    result = run_local_mp(_experiment(tmp_path, evaluate_every_s=1.0), stream=io.StringIO())
    assert "budget" in result.stop_reason and result.learner_steps > 0
    assert result.eval_mean_return is not None


def test_r2d2_resumes_its_learner_target_network_and_replay(tmp_path):
    first = _experiment(tmp_path, steps=2_000, checkpoint_every_s=1.0)
    run_inprocess(first, stream=io.StringIO())
    saved = latest_checkpoint_info(learner_directory(tmp_path))
    replay = json.loads(Path(replay_metadata_path(tmp_path)).read_text())
    reader = tf.train.load_checkpoint(saved.path)
    names = reader.get_variable_to_shape_map()
    assert any(n.startswith("target_network/") for n in names)
    assert any(n.startswith("optimizer/") for n in names)
    assert replay["items"]["unrolls"] > 0

    budget = saved.counts["env_steps"] + 1_500
    stream = io.StringIO()
    resumed = run_inprocess(dataclasses.replace(first, max_env_steps=budget, resume=True),
                            stream=stream)
    line = re.search(r"learner step (\d+), env steps (\d+), replay items (\d+)",
                     stream.getvalue())
    assert line, stream.getvalue()[-2_000:]
    assert int(line[1]) == saved.step and int(line[2]) == saved.counts["env_steps"]
    assert int(line[3]) == replay["items"]["unrolls"]
    assert resumed.env_steps >= budget and resumed.learner_steps > saved.step


def test_too_few_environments_for_the_evaluation_ones_fail_before_anything_starts():
    with pytest.raises(ValueError, match="num_eval_envs=8 of the 8 environments"):
        Experiment(R2D2Builder(R2D2Config(num_eval_envs=8)), "gym:CartPole-v1",
                   num_runners=2, envs_per_runner=4)
