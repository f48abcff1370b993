"""The V-trace agent's parts working together: network, policy, learner, replay."""

from __future__ import annotations

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
    builder = VTraceBuilder(config)
    make_env = environment_factory("fake:obs=4,len=7")
    spec = make_environment_spec(make_env(0))
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, seed=1)
    replay = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    stop = threading.Event()
    counter = Counter()
    server = None
    try:
        adder = builder.make_adder(replay.localhost_client(), 8, spec, policy, stop)
        server = builder.make_inference_server(policy, spec, adder,
                                               InferenceConfig(max_envs=8), counter)
        runner = EnvRunner(make_env, 8, seed=0)
        server.connect("r", 8)
        runner.run(lambda b: server.step("r", b), max_steps=3 * config.unroll_length + 1)
        assert adder.unrolls_written == 24

        learner = builder.make_learner(networks, f"localhost:{replay.port}", counter)
        obs = np.ones((1, 4), np.float32)
        before = policy.step(obs, np.zeros(1, np.int32), policy.initial_state(1))[1]["logits"]
        metrics = {}
        for _ in range(5):
            metrics = learner.step() or metrics
        assert counter.get_counts()["learner_steps"] >= 1
        assert np.isfinite(metrics["loss"]) and metrics["gradient_norm"] > 0
        assert metrics["value_std"] > 0  # the fake env's observations differ
        # The policy reads the learner's variables: its output moved without any copy.
        after = policy.step(obs, np.zeros(1, np.int32), policy.initial_state(1))[1]["logits"]
        assert not np.allclose(before, after)
    finally:
        stop.set()
        if server is not None:
            server.close()
        replay.stop()


def test_learner_save_and_restore_round_trip():
    config = VTraceConfig(unroll_length=3, batch_size=2, queue_size=8, hidden_sizes=(8,))
    builder = VTraceBuilder(config)
    spec = make_environment_spec(environment_factory("fake:obs=4")(0))
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec)
    replay = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    try:
        learner = builder.make_learner(networks, f"localhost:{replay.port}")
        state = learner.save()
        for v in networks.variables:
            v.assign(tf.zeros_like(v))
        learner.restore(state)
        for v, saved in zip(networks.variables, state["network"], strict=True):
            np.testing.assert_array_equal(v.numpy(), saved)
        assert len(learner.get_variables(["policy"])[0]) == len(networks.variables)
    finally:
        replay.stop()
