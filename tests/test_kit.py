"""The kit's new pieces: the epsilon-greedy policy on a schedule of the run's env steps
(driven by a real inference server and counter), and the Q-learning targets and loss."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from dm_env import specs

from seed_agents.inference.protocol import FIRST, MID
from seed_agents.inference.server import InferenceConfig, InferenceServer
from seed_agents.losses import double_q_targets, huber_td_loss
from seed_agents.policies import EpsilonGreedyPolicy, LinearSchedule
from seed_agents.utils.counting import Counter
from tests.test_inference_server import SPEC as INFERENCE_SPEC
from tests.test_inference_server import batch

SPEC = dataclasses.replace(INFERENCE_SPEC, actions=specs.DiscreteArray(4, dtype=np.int32))
GREEDY = 2


def q_network(observation: tf.Tensor) -> tf.Tensor:
    """Q-values whose argmax is GREEDY for every observation."""
    return tf.one_hot(tf.fill(tf.shape(observation)[:1], GREEDY), 4)


def greedy_fraction(policy: EpsilonGreedyPolicy, env_ids: np.ndarray) -> float:
    obs = np.zeros((len(env_ids), 2), np.float32)
    action, extras, state = policy.step(obs, np.zeros(len(env_ids), np.int32), (), env_ids)
    assert action.dtype == np.int32 and extras == {} and state == ()
    return float(np.mean(action == GREEDY))


def test_linear_schedule_moves_from_start_to_end_then_stays():
    schedule = LinearSchedule(1.0, 0.1, 100)
    assert [schedule(s) for s in (0, 50, 100, 10_000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert LinearSchedule(0.5, 0.2, 0)(0) == 0.2
    with pytest.raises(ValueError, match="steps must be >= 0"):
        LinearSchedule(1.0, 0.1, -1)


def test_epsilon_follows_the_run_counts_and_evaluation_envs_stay_greedy():
    policy = EpsilonGreedyPolicy(q_network, SPEC, LinearSchedule(1.0, 0.0, 1000),
                                 num_evaluation_envs=8, seed=0)
    ids = np.arange(8, 4008)
    assert policy.epsilon == 1.0
    assert greedy_fraction(policy, ids) == pytest.approx(0.25, abs=0.03)  # uniform over 4
    assert greedy_fraction(policy, np.arange(8)) == 1.0  # evaluation environments
    policy.observe_counts({"env_steps": 500})
    assert policy.epsilon == 0.5
    assert greedy_fraction(policy, ids) == pytest.approx(0.625, abs=0.03)
    policy.observe_counts({"env_steps": 5000})
    assert greedy_fraction(policy, ids) == 1.0
    fixed = EpsilonGreedyPolicy(q_network, SPEC, 0.0)
    fixed.observe_counts({"env_steps": 0})  # a number is not a schedule: nothing moves
    assert fixed.epsilon == 0.0 and greedy_fraction(fixed, ids) == 1.0
    evaluation = EpsilonGreedyPolicy(q_network, SPEC, 1.0, evaluation=True)
    assert greedy_fraction(evaluation, ids) == 1.0


def test_an_epsilon_outside_zero_one_or_continuous_actions_are_refused():
    with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\], got 1.5"):
        EpsilonGreedyPolicy(q_network, SPEC, 1.5)
    policy = EpsilonGreedyPolicy(q_network, SPEC, lambda steps: 1.0 + steps)
    with pytest.raises(ValueError, match="epsilon must be in"):
        policy.observe_counts({"env_steps": 3})
    continuous = dataclasses.replace(SPEC, actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0))
    with pytest.raises(ValueError, match="discrete actions"):
        EpsilonGreedyPolicy(q_network, continuous)


@pytest.mark.parametrize("restored_steps, greedy", [(0, False), (10_000, True)])
def test_the_inference_server_hands_the_policy_the_run_counts(restored_steps, greedy):
    # A resumed run's counter comes back with its env steps, restored (as the learner node
    # does) after the server was built: the schedule continues from the first batch on.
    counter = Counter()
    policy = EpsilonGreedyPolicy(q_network, SPEC, LinearSchedule(1.0, 0.0, 1000), seed=1)
    server = InferenceServer(policy, SPEC, None, InferenceConfig(max_envs=64),
                             counter=counter)
    counter.increment(env_steps=restored_steps)
    try:
        server.connect("direct", 64)
        first = server.step("direct", batch(np.zeros(128), [FIRST] * 64))
        actions = np.concatenate([server.step("direct", batch(np.zeros(128), [MID] * 64))
                                  for _ in range(4)])
    finally:
        server.close()
    assert counter.get_counts()["env_steps"] == restored_steps + 4 * 64
    assert (np.mean(first == GREEDY) == 1.0) == greedy
    assert (np.mean(actions == GREEDY) == 1.0) == greedy
    assert policy.epsilon == (0.0 if greedy else pytest.approx(1.0 - 4 * 64 / 1000))


def test_double_q_targets_pick_with_the_online_network_and_value_with_the_target():
    online = tf.constant([[1.0, 5.0, 0.0], [3.0, 0.0, 2.0]])
    target = tf.constant([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    targets = double_q_targets(tf.constant([1.0, 2.0]), tf.constant([0.5, 0.0]), online, target)
    np.testing.assert_allclose(targets.numpy(), [1.0 + 0.5 * 20.0, 2.0])


def test_huber_td_loss_is_quadratic_inside_delta_and_linear_beyond():
    q = tf.constant([0.0, 0.0, 0.0])
    targets = tf.constant([0.5, -2.0, 4.0])
    expected = np.mean([0.5 * 0.5**2, 1.0 * (2.0 - 0.5), 1.0 * (4.0 - 0.5)])
    assert float(huber_td_loss(q, targets, 1.0)) == pytest.approx(expected)
    keras = tf.keras.losses.Huber(2.0)(targets[:, None], q[:, None])
    assert float(huber_td_loss(q, targets, 2.0)) == pytest.approx(float(keras))
