"""The V-trace agent's parts working together: network, policy, learner, replay."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
import reverb
import tensorflow as tf

from builders.vtrace import VTraceBuilder
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.envs import environment_factory
from seed_agents.inference.runner import EnvRunner
from seed_agents.inference.server import InferenceConfig
from seed_agents.specs import make_environment_spec
from seed_agents.utils.counting import Counter


def test_lstm_unroll_matches_step_by_step_acting_with_resets():
    net = PolicyValueNetwork(3, (5,), hidden_sizes=(8,), lstm_size=6)
    rng = np.random.default_rng(0)
    t, b = 7, 2
    obs = rng.normal(size=(t, b, 5)).astype(np.float32)
    prev_action = rng.integers(0, 3, size=(t, b)).astype(np.int32)
    first = np.zeros((t, b), bool)
    first[0] = True
    first[4, 1] = True  # an episode boundary inside the unroll, for env 1 only
    start = tuple(tf.constant(rng.normal(size=(b, 6)).astype(np.float32)) for _ in range(2))
    logits, values = net.unroll(obs, prev_action, first, start)

    state = start
    for i in range(t):
        initial = net.initial_state(b)
        state = tuple(tf.where(first[i][:, None], init, s)
                      for init, s in zip(initial, state, strict=True))
        (step_logits, step_values), state = net(obs[i], prev_action[i], state)
        np.testing.assert_allclose(logits[i], step_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(values[i], step_values, rtol=1e-5, atol=1e-5)


def test_config_validation_explains_itself():
    with pytest.raises(ValueError, match="queue_size"):
        VTraceConfig(batch_size=16, queue_size=20)
    with pytest.raises(ValueError, match="discount"):
        VTraceConfig(discount=1.5)
    with pytest.raises(ValueError, match="unroll_length"):
        VTraceConfig(unroll_length=0)


@contextlib.contextmanager
def _learner_on_served_unrolls(config: VTraceConfig, unrolls_per_env: int = 3):
    """(builder, networks, policy, learner, counter) after 8 fake environments acted
    `unrolls_per_env` unrolls each through central inference into the real queue."""
    builder = VTraceBuilder(config)
    make_env = environment_factory("fake:obs=4,len=7")
    spec = make_environment_spec(make_env(0))
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, seed=1)
    replay = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    stop = threading.Event()
    counter = Counter()
    server = adder = learner = None
    try:
        adder = builder.make_adder(replay.localhost_client(), 8, spec, policy, stop)
        server = builder.make_inference_server(policy, spec, adder,
                                               InferenceConfig(max_envs=8), counter)
        runner = EnvRunner(make_env, 8, seed=0)
        server.connect("r", 8)
        runner.run(lambda b: server.step("r", b),
                   max_steps=unrolls_per_env * config.unroll_length + 1)
        assert adder.unrolls_written == 8 * unrolls_per_env
        learner = builder.make_learner(networks, f"localhost:{replay.port}", counter)
        yield builder, networks, policy, learner, counter
    finally:
        # In the order a run stops them: the streams close while the replay is up.
        stop.set()
        if server is not None:
            server.close()
        for part in (adder, learner):
            if part is not None:
                part.close()
        replay.stop()


@pytest.mark.parametrize("options", [
    {},
    {"lstm_size": 8},
    {"separate_value_torso": True, "ppo_clip": 0.2, "sgd_steps_per_batch": 2},
    {"ppo_clip": None, "normalize_advantages": True},
    {"ppo_clip": 0.1, "normalize_advantages": True},
])
def test_learner_trains_on_unrolls_served_by_central_inference(options):
    config = VTraceConfig(unroll_length=5, batch_size=4, queue_size=32, hidden_sizes=(16,),
                          **options)
    with _learner_on_served_unrolls(config) as (_, _, policy, learner, counter):
        obs = np.ones((1, 4), np.float32)
        before = policy.step(obs, np.zeros(1, np.int32), policy.initial_state(1))[1]["logits"]
        metrics = {}
        for _ in range(5):
            metrics = learner.step() or metrics
        assert counter.get_counts()["learner_steps"] >= 1
        assert np.isfinite(metrics["loss"]) and metrics["gradient_norm"] > 0
        assert metrics["value_std"] > 0  # the fake env's observations differ
        assert -np.inf < metrics["explained_variance"] <= 1.0
        # PPO's clip reports how much of the batch it held back; without it, nothing.
        if config.ppo_clip is None:
            assert "clip_fraction" not in metrics
        else:
            assert 0.0 <= metrics["clip_fraction"] <= 1.0
        # The policy reads the learner's variables: its output moved without any copy.
        after = policy.step(obs, np.zeros(1, np.int32), policy.initial_state(1))[1]["logits"]
        assert not np.allclose(before, after)


def test_learner_logs_policy_lag_reuse_and_annealed_schedules():
    config = VTraceConfig(unroll_length=5, batch_size=4, queue_size=32, hidden_sizes=(16,),
                          sgd_steps_per_batch=3, learning_rate=1e-3, entropy_cost=0.02,
                          anneal_steps=4, final_learning_rate_fraction=0.5,
                          final_entropy_fraction=0.0)
    with _learner_on_served_unrolls(config) as (_, networks, policy, learner, _):
        logged = []
        while len(logged) < 6:  # 24 unrolls: 6 batches, all acted before any update
            metrics = learner.step()
            if metrics:
                logged.append(metrics)
        # Every row was acted at version 0, so the k-th batch is k updates behind.
        assert [m["policy_lag"] for m in logged] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert int(networks.version.numpy()) == learner.num_steps == 6
        assert all(m["batch_reuse"] == 3.0 for m in logged)
        np.testing.assert_allclose([m["learning_rate"] for m in logged],
                                   [1e-3, 8.75e-4, 7.5e-4, 6.25e-4, 5e-4, 5e-4])
        np.testing.assert_allclose([m["entropy_cost"] for m in logged],
                                   [0.02, 0.015, 0.01, 0.005, 0.0, 0.0], atol=1e-9)
        # The policy now stamps the newest version on what it acts.
        extras = policy.step(np.ones((2, 4), np.float32), np.zeros(2, np.int32),
                             policy.initial_state(2))[1]
        assert extras["policy_version"].tolist() == [6, 6]


def test_learner_save_and_restore_round_trip():
    config = VTraceConfig(unroll_length=3, batch_size=2, queue_size=8, hidden_sizes=(8,))
    builder = VTraceBuilder(config)
    spec = make_environment_spec(environment_factory("fake:obs=4")(0))
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec)
    replay = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    address = f"localhost:{replay.port}"
    try:
        with contextlib.closing(builder.make_learner(networks, address)) as learner:
            state = learner.save()
            for v in networks.variables:
                v.assign(tf.zeros_like(v))
            learner.restore(state)
            for v, saved in zip(networks.variables, state["network"], strict=True):
                np.testing.assert_array_equal(v.numpy(), saved)
            assert len(learner.get_variables(["policy"])[0]) == len(networks.variables)
    finally:
        replay.stop()
