"""Implicit Q-learning and its kit pieces: the expectile loss, the advantage weights, and a
learner that improves on the data's actions without asking about any the data lacks."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from seed_agents.agents.iql.config import IQLConfig
from seed_agents.agents.iql.learning import IQLLearner
from seed_agents.agents.iql.networks import IQLNetworks
from seed_agents.losses import advantage_weights, expectile_loss, gaussian_log_likelihood
from tests.bandits import bandit_dataset


def test_expectile_loss_weighs_errors_below_and_above_the_target_apart():
    difference = tf.constant([2.0, -1.0, 0.0, -3.0])  # target - prediction
    got = expectile_loss(difference, 0.7).numpy()
    assert got == pytest.approx((0.7 * 4 + 0.3 * 1 + 0.0 + 0.3 * 9) / 4, rel=1e-6)
    # At 0.5 it is half the mean squared error.
    assert expectile_loss(difference, 0.5).numpy() == pytest.approx(0.5 * 14 / 4, rel=1e-6)


def test_the_expectile_of_samples_rises_with_the_expectile():
    samples = tf.constant(np.random.default_rng(0).normal(size=4000), tf.float32)
    fits = []
    for expectile in (0.5, 0.7, 0.9):
        value = tf.Variable(0.0)
        optimizer = tf.keras.optimizers.SGD(0.5)
        for _ in range(200):
            with tf.GradientTape() as tape:
                loss = expectile_loss(samples - value, expectile)
            optimizer.apply_gradients([(tape.gradient(loss, value), value)])
        fits.append(float(value.numpy()))
    assert fits[0] == pytest.approx(float(np.mean(samples)), abs=0.01)  # the mean
    assert fits[0] < fits[1] < fits[2] and fits[2] > 0.8  # N(0, 1)'s 0.9-expectile ~0.86


def test_advantage_weights_are_exponential_clipped_and_stop_gradients():
    advantage = tf.Variable([0.0, 1.0, -1.0, 10.0])
    with tf.GradientTape() as tape:
        weights = advantage_weights(advantage * 1.0, temperature=2.0, max_weight=100.0)
    np.testing.assert_allclose(weights.numpy(), [1.0, np.exp(2.0), np.exp(-2.0), 100.0],
                               rtol=1e-6)
    assert tape.gradient(weights, advantage) is None
    log_likelihood = gaussian_log_likelihood(tf.constant([[1.0, 0.0]]), tf.zeros([1, 2]),
                                             tf.zeros([1, 2])).numpy()
    assert log_likelihood[0] == pytest.approx(-0.5 - np.log(2 * np.pi), rel=1e-6)



def test_iql_clones_the_better_of_the_datas_actions():
    tf.random.set_seed(0)
    config = IQLConfig(learning_rate=3e-3, batch_size=64, hidden_sizes=(32, 32),
                       critic_hidden_sizes=(32, 32), tau=0.05)
    networks = IQLNetworks((2,), 2, (32, 32), (32, 32))
    learner = IQLLearner(networks, bandit_dataset(peak=0.5), config)
    for _ in range(800):
        metrics = learner.step()
    mean, _ = networks.actor(tf.zeros([1, 2]))
    # Behaviour cloning of these actions gives their mean, 0; weighting by exp(3 (Q - V))
    # moves the policy towards the reward's peak at 0.5.
    assert np.all(mean.numpy() > 0.2), mean.numpy()
    assert set(metrics) >= {"value_loss", "actor_loss", "critic_loss", "mean_weight"}
    assert np.isfinite(list(metrics.values())).all()
    assert learner.checkpoint_objects()["step"] is learner.step_variable


def test_iql_config_checks_its_fields():
    for field, value, message in [("expectile", 1.0, "expectile must be in"),
                                  ("temperature", -1.0, "temperature must be >= 0"),
                                  ("tau", 0.0, "tau must be in"),
                                  ("max_weight", 0.0, "max_weight must be > 0")]:
        with pytest.raises(ValueError, match=message):
            IQLConfig(**{field: value})
