"""The observation torsos: shapes, parameter counts, the residual skip, and both agents'
networks built on each pixel torso."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from seed_agents.agents.r2d2.config import R2D2Config
from seed_agents.agents.r2d2.networks import RecurrentQNetwork
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.networks import PolicyValueNetwork
from seed_agents.networks.torsos import TORSOS, ResidualBlock, embed

PIXELS = (84, 84, 4)
PIXEL_TORSOS = ("nature_cnn", "impala_resnet")
NUM_ACTIONS = 6

# Features after flattening an 84x84x4 frame stack, and convolution parameters (weights
# and biases), worked out by hand from the papers' layer sizes:
#   Nature: 20x20x32 -> 9x9x64 -> 7x7x64; 8*8*4*32+32 + 4*4*32*64+64 + 3*3*64*64+64.
#   IMPALA: 84 -> 42 -> 21 -> 11 by the stride-2 pools, 32 channels last; per section of
#   width w after c_in channels, one conv (9*c_in*w + w) and four in the blocks
#   (9*w*w + w each).
EXPECTED = {
    "mlp": (84 * 84 * 4, 0),
    "nature_cnn": (7 * 7 * 64, 8224 + 32832 + 36928),
    "impala_resnet": (11 * 11 * 32, (592 + 4 * 2320) + (4640 + 4 * 9248) + (9248 + 4 * 9248)),
    # MinAtar's one 3x3 convolution of 16 channels, no padding: 84 -> 82.
    "minatar": (82 * 82 * 16, 3 * 3 * 4 * 16 + 16),
}


def _pixels(batch: int, seed: int = 0) -> tf.Tensor:
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, (batch, *PIXELS), dtype=np.uint8))


def _count(variables) -> int:
    return sum(int(np.prod(v.shape)) for v in variables)


def test_every_torso_is_expected():
    assert set(TORSOS) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_torso_output_shape_and_parameters(name):
    layers = TORSOS[name]()  # float32 by default
    features = embed(layers, _pixels(3))
    expected_features, expected_params = EXPECTED[name]
    assert features.shape == (3, expected_features)
    assert features.dtype == tf.float32
    assert _count(v for layer in layers for v in layer.trainable_variables) == expected_params


def test_impala_resnet_ends_in_relu():
    # The blocks end in a sum; the torso's last ReLU is what makes its features >= 0.
    features = embed(TORSOS["impala_resnet"](), _pixels(2))
    assert float(tf.reduce_min(features)) >= 0.0
    assert float(tf.reduce_max(features)) > 0.0


def test_residual_block_with_zero_convolutions_is_the_identity():
    block = ResidualBlock(8)
    x = tf.random.normal([2, 5, 5, 8])
    block(x)  # Builds the variables.
    for variable in block.trainable_variables:
        variable.assign(tf.zeros_like(variable))
    np.testing.assert_array_equal(block(x).numpy(), x.numpy())


def test_residual_block_adds_its_convolutions_to_the_input():
    block = ResidualBlock(8)
    x = tf.random.normal([2, 5, 5, 8], seed=1)
    y = block(x)
    residual = block.conv_1(tf.nn.relu(block.conv_0(tf.nn.relu(x))))
    assert float(tf.reduce_max(tf.abs(y - x))) > 0.0
    np.testing.assert_allclose(y.numpy(), (x + residual).numpy(), rtol=1e-5, atol=1e-5)
    assert len(block.trainable_variables) == 4  # Two kernels, two biases.


@pytest.mark.parametrize("torso", PIXEL_TORSOS)
def test_vtrace_network_builds_and_trains_every_torso_variable(torso):
    network = PolicyValueNetwork(NUM_ACTIONS, PIXELS, (32,), torso=torso)
    conv_params = EXPECTED[torso][1]
    features = EXPECTED[torso][0]
    dense = (features * 32 + 32) + (32 * NUM_ACTIONS + NUM_ACTIONS) + (32 + 1)
    # Every torso variable is the network's (the learner trains and checkpoints these).
    assert _count(network.trainable_variables) == conv_params + dense

    (logits, value), state = network(_pixels(2), tf.zeros([2], tf.int32), ())
    assert logits.shape == (2, NUM_ACTIONS) and value.shape == (2,) and state == ()
    observation = tf.reshape(_pixels(6), [3, 2, *PIXELS])  # Time-major [T, B, ...].
    with tf.GradientTape() as tape:
        logits, values = network.unroll(
            observation, tf.zeros([3, 2], tf.int32), tf.zeros([3, 2], bool), ())
        loss = tf.reduce_sum(logits) + tf.reduce_sum(values)
    assert logits.shape == (3, 2, NUM_ACTIONS) and values.shape == (3, 2)
    gradients = tape.gradient(loss, network.trainable_variables)
    assert all(g is not None for g in gradients)


@pytest.mark.parametrize("torso", PIXEL_TORSOS)
def test_r2d2_network_builds_and_clones_every_torso(torso):
    network = RecurrentQNetwork(NUM_ACTIONS, PIXELS, (32,), lstm_size=16,
                                head_hidden_size=8, torso=torso)
    q, state = network(_pixels(2), tf.zeros([2], tf.int32), network.initial_state(2))
    assert q.shape == (2, NUM_ACTIONS) and state[0].shape == (2, 16)
    observation = tf.reshape(_pixels(4), [2, 2, *PIXELS])
    q, _ = network.unroll(observation, tf.zeros([2, 2], tf.int32), tf.zeros([2, 2], bool),
                          network.initial_state(2))
    assert q.shape == (2, 2, NUM_ACTIONS)
    # The target network copies variables pairwise: the residual blocks' must line up.
    target = network.clone()
    assert _count(target.variables) == _count(network.variables)
    for a, b in zip(target.variables, network.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("config", [VTraceConfig, R2D2Config])
def test_configs_accept_every_torso_and_reject_others(config):
    for name in TORSOS:
        assert config(torso=name).torso == name
    with pytest.raises(ValueError, match="impala_resnet"):
        config(torso="resnet50")


def _copy_variables(target: tf.Module, source: tf.Module) -> None:
    for a, b in zip(target.variables, source.variables, strict=True):
        a.assign(b)


@pytest.mark.parametrize("torso", PIXEL_TORSOS)
def test_bfloat16_torso_computes_in_bfloat16_and_keeps_float32_variables_and_outputs(torso):
    full = PolicyValueNetwork(NUM_ACTIONS, PIXELS, (32,), torso=torso, separate_value_torso=True)
    half = PolicyValueNetwork(NUM_ACTIONS, PIXELS, (32,), torso=torso, separate_value_torso=True,
                              precision="bfloat16")
    # The same variables, all float32 (but the int64 version count): checkpoints and the
    # optimizer do not change.
    assert [v.shape for v in half.variables] == [v.shape for v in full.variables]
    assert {v.dtype for v in half.trainable_variables} == {tf.float32}
    assert {v.dtype for v in half.variables} == {tf.float32, tf.int64}
    assert {layer.compute_dtype for layer in half._conv + half._torso} == {"bfloat16"}
    # Seeded weights on the initializer's scale: bfloat16's error depends on the weights.
    rng = np.random.default_rng(0)
    for v in full.variables:
        v.assign(rng.normal(0.0, float(np.std(v.numpy())), v.shape).astype(np.float32))
    _copy_variables(half, full)

    observation = _pixels(4)
    (logits, value), _ = half(observation, tf.zeros([4], tf.int32), ())
    (full_logits, full_value), _ = full(observation, tf.zeros([4], tf.int32), ())
    assert logits.dtype == tf.float32 and value.dtype == tf.float32
    # bfloat16 keeps 8 bits of mantissa: close to float32 on the outputs' scale (errors of
    # up to 6% of it over 8 initializations of the deep residual stack), not bit-identical.
    for out, full_out in ((logits, full_logits), (value, full_value)):
        scale = float(np.abs(full_out.numpy()).max())
        np.testing.assert_allclose(out.numpy(), full_out.numpy(), atol=0.1 * scale)
    assert not np.array_equal(logits.numpy(), full_logits.numpy())
    with tf.GradientTape() as tape:
        logits, values = half.unroll(tf.reshape(observation, [2, 2, *PIXELS]),
                                     tf.zeros([2, 2], tf.int32), tf.zeros([2, 2], bool), ())
        loss = tf.reduce_sum(logits) + tf.reduce_sum(values)
    gradients = tape.gradient(loss, half.trainable_variables)
    assert all(g is not None and g.dtype == tf.float32 for g in gradients)


def test_bfloat16_r2d2_network_clones_with_its_precision():
    network = RecurrentQNetwork(NUM_ACTIONS, PIXELS, (32,), lstm_size=16, head_hidden_size=8,
                                torso="nature_cnn", precision="bfloat16")
    q, _ = network(_pixels(2), tf.zeros([2], tf.int32), network.initial_state(2))
    assert q.dtype == tf.float32
    target = network.clone()
    assert {layer.compute_dtype for layer in target._conv} == {"bfloat16"}
    np.testing.assert_array_equal(
        target(_pixels(2), tf.zeros([2], tf.int32), target.initial_state(2))[0].numpy(),
        q.numpy())


@pytest.mark.parametrize("config", [VTraceConfig, R2D2Config])
def test_configs_accept_the_precisions_and_reject_others(config):
    assert config(precision="bfloat16").precision == "bfloat16"
    assert config(precision="auto").precision == "auto"
    with pytest.raises(ValueError, match="bfloat16"):
        config(precision="float16")
