"""Observation torsos shared by the agents' networks, by name.

A torso maps a batch of observations to a flat feature vector. Vector observations go
through the agent's MLP layers only; pixel torsos put convolutions in front of them: the
Nature DQN's three ("nature_cnn"), IMPALA's deep residual stack ("impala_resnet") or the
MinAtar paper's single small one ("minatar", for 10x10 grids of object planes). Each
is a plain list of Keras layers that `embed` runs in order, so a network holds its torso
as a list attribute and its variables are tracked, trained and checkpointed like the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from seed_agents.utils.hardware import check_precision, resolve_precision

PRECISIONS: dict[str, str] = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
"""Resolved torso precision -> the Keras dtype policy of the torso's layers.

"bfloat16" computes the torso (convolutions and MLP layers) in bfloat16 while its variables,
the heads, the recurrent core and the losses stay float32 (Keras mixed precision). On a CPU
with AVX512_BF16, oneDNN runs the Nature CNN's convolutions natively in it: measured here,
CPU time per frame fell from 0.61 to 0.37 ms for a learner step and from 0.21 to 0.12 ms
for inference. CPUs without native bfloat16 emulate it, 8x slower than float32 for a
learner step on an AVX2-only EPYC. A config's "auto" (see `seed_agents.utils.hardware`)
becomes one of these where the network is built.
"""


def torso_dtype(precision: str) -> str:
    """The Keras dtype policy for a config's `precision` ("auto" resolved on this machine)."""
    return PRECISIONS[resolve_precision(precision).precision]


CONV_INITIALIZER = "he_uniform"
"""Kernel initializer of every convolution: variance 2 / fan-in, the scale ReLUs keep.

Keras's default (Glorot) also divides by the fan-out, which for the Nature CNN's first
layer (fan-in 256, fan-out 2048) leaves pre-activations of ~0.05 on Pong's frames: small
enough that a few hundred Adam steps of a consistent push move a unit's bias past them.
Observed: V-trace on Pong with Glorot convolutions, a default-scale policy head and Adam at
6e-4 ended with all 32 first-layer units below zero for every frame, a network whose output
no longer depended on its input, at a random policy's return after 10M frames. With He
convolutions, a near-zero policy head (see `PolicyValueNetwork`) and Adam at 3e-4, the
first layer stayed alive and the return rose.
"""


def _conv(filters: int, kernel: int, strides: int = 1, **kwargs) -> tf.keras.layers.Conv2D:
    return tf.keras.layers.Conv2D(filters, kernel, strides=strides,
                                  kernel_initializer=CONV_INITIALIZER, **kwargs)


def _nature_cnn(dtype: str = "float32") -> list[tf.keras.layers.Layer]:
    """The convolutions of the Nature DQN torso (Mnih et al. 2015), for 84x84 frames."""
    return [
        _conv(32, 8, strides=4, activation="relu", name="conv_0", dtype=dtype),
        _conv(64, 4, strides=2, activation="relu", name="conv_1", dtype=dtype),
        _conv(64, 3, strides=1, activation="relu", name="conv_2", dtype=dtype),
    ]


class ResidualBlock(tf.keras.layers.Layer):
    """x + conv(relu(conv(relu(x)))): the pre-activation residual block of IMPALA's torso.

    A layer of its own because `embed` runs a plain list of layers, and a list cannot
    express the skip connection. Both convolutions keep the input's shape (3x3, stride 1,
    same padding, as many channels as the input), so the sum needs no projection.
    """

    def __init__(self, channels: int, **kwargs):
        super().__init__(**kwargs)
        self.conv_0 = _conv(channels, 3, padding="same", name="conv_0", dtype=self.dtype_policy)
        self.conv_1 = _conv(channels, 3, padding="same", name="conv_1", dtype=self.dtype_policy)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        y = self.conv_0(tf.nn.relu(x))
        y = self.conv_1(tf.nn.relu(y))
        return x + y


def _impala_resnet(
    dtype: str = "float32", channels: tuple[int, ...] = (16, 32, 32)
) -> list[tf.keras.layers.Layer]:
    """The deep torso of IMPALA (Espeholt et al. 2018, fig. 3), for 84x84 frames.

    Per section: a 3x3 convolution, a 3x3 max-pool of stride 2 (84 -> 42 -> 21 -> 11), and
    two residual blocks; a ReLU at the end, since each block's output is a sum that no
    activation follows. At 84x84x4 its ~98K convolution parameters are about the Nature
    CNN's (~78K), but its ~53M multiply-adds per frame are ~7 times as many (full-size
    early layers): inference and learning cost more per frame, not the parameter copy.
    """
    layers: list[tf.keras.layers.Layer] = []
    for i, width in enumerate(channels):
        layers += [
            _conv(width, 3, padding="same", name=f"section_{i}_conv", dtype=dtype),
            tf.keras.layers.MaxPool2D(3, strides=2, padding="same", name=f"section_{i}_pool",
                                      dtype=dtype),
            ResidualBlock(width, name=f"section_{i}_block_0", dtype=dtype),
            ResidualBlock(width, name=f"section_{i}_block_1", dtype=dtype),
        ]
    layers.append(tf.keras.layers.ReLU(name="resnet_relu", dtype=dtype))
    return layers


def _minatar_cnn(dtype: str = "float32") -> list[tf.keras.layers.Layer]:
    """The MinAtar paper's torso (Young & Tian 2019): one 3x3 convolution of 16 channels,
    stride 1, no padding (10x10 -> 8x8x16 = 1,024 features). The paper's 128 ReLU units
    after it are the agent's `hidden_sizes=128,`."""
    return [_conv(16, 3, strides=1, activation="relu", name="conv_0", dtype=dtype)]


def _no_convolutions(dtype: str = "float32") -> list[tf.keras.layers.Layer]:
    return []


TORSOS: dict[str, Callable[..., list[tf.keras.layers.Layer]]] = {
    "mlp": _no_convolutions,
    "nature_cnn": _nature_cnn,
    "impala_resnet": _impala_resnet,
    "minatar": _minatar_cnn,
}
"""Convolutional front ends by name, each built as `TORSOS[name](dtype)` with a dtype policy
of `PRECISIONS`; an agent's MLP layers follow each."""


def check_torso(torso: str) -> None:
    """Raises ValueError unless `torso` names an entry of `TORSOS`.

    The agents' configs call this, so that a torso added to the table needs no edit there.
    """
    if torso not in TORSOS:
        raise ValueError(f"torso must be one of {sorted(TORSOS)}, got {torso!r}.")


def check_torso_observation(torso: str, observation_shape: Sequence[int]) -> None:
    """Raises ValueError, naming torso and shape, when `torso` cannot read observations of
    `observation_shape`: the builders call it with the environment's spec, so that the
    mismatch is told before anything starts rather than as a convolution's shape error.

    Pixel torsos need `[H, W, C]` images; "minatar" needs MinAtar's `[10, 10, C]` grids.
    """
    check_torso(torso)
    shape = tuple(int(d) for d in observation_shape)
    if torso == "mlp":
        return
    if torso == "minatar":
        if len(shape) != 3 or shape[:2] != (10, 10):
            raise ValueError(f"torso=minatar reads MinAtar's 10x10xC grids (minatar:<game> "
                             f"ids); this environment's observations are {list(shape)}.")
        return
    if len(shape) != 3:
        raise ValueError(f"torso={torso} reads [height, width, channels] images; this "
                         f"environment's observations are {list(shape)} (use torso=mlp).")


def make_torso(
    torso: str, hidden_sizes: Sequence[int], precision: str = "float32"
) -> tuple[list[tf.keras.layers.Layer], list[tf.keras.layers.Layer]]:
    """The convolutions named `torso` and ReLU MLP layers `torso_<i>` of `hidden_sizes`,
    all computing in `precision` ("auto" resolved here): what `embed` runs. Call it inside
    the network's name scope so the variables are named after the network.

    Raises:
      ValueError: For an unknown torso or precision.
    """
    check_torso(torso)
    check_precision(precision)
    dtype = torso_dtype(precision)
    mlp = [tf.keras.layers.Dense(size, activation="relu", name=f"torso_{i}", dtype=dtype)
           for i, size in enumerate(hidden_sizes)]
    return TORSOS[torso](dtype), mlp


def embed(
    conv: list[tf.keras.layers.Layer],
    observation: tf.Tensor,
    mlp: Sequence[tf.keras.layers.Layer] = (),
) -> tf.Tensor:
    """Runs `conv` (possibly empty), flattens, then runs `mlp`: [B, ...] -> [B, features].

    Pixels arrive as uint8 (4x less to send than float32) and are scaled to [0, 1] here;
    bool observations (MinAtar's object planes) are already 0 or 1 and are only cast.
    The features are float32 whatever precision the layers compute in, so that heads,
    cores and losses never see bfloat16.
    """
    if conv:
        x = tf.cast(observation, tf.float32)
        if observation.dtype != tf.bool:
            x = x / 255.0
        for layer in conv:
            x = layer(x)
    else:
        x = tf.cast(observation, tf.float32)
    x = tf.reshape(x, [-1, _num_features(x)])
    for layer in mlp:
        x = layer(x)
    return tf.cast(x, tf.float32)


def _num_features(x: tf.Tensor) -> int:
    size = 1
    for dim in x.shape[1:]:
        size *= int(dim)
    return size


def recurrent_unroll(
    cell: tf.keras.layers.LSTMCell,
    inputs: tf.Tensor,
    first: tf.Tensor,
    state: tuple[tf.Tensor, ...],
) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
    """Runs `cell` over time-major `inputs` [T, B, F] from `state`; returns the outputs
    [T, B, H] and the state after the last step.

    The state is reset to zeros wherever `first` [T, B] is true, exactly as the inference
    server resets it when an episode starts, so learner and actor compute the same thing
    on sequences that cross episode boundaries.
    """
    zeros = tuple(tf.zeros_like(s) for s in state)

    def step(carry, step_input):
        _, hidden = carry
        x_t, first_t = step_input
        hidden = tuple(
            tf.where(first_t[:, None], zero, h) for zero, h in zip(zeros, hidden, strict=True)
        )
        out, hidden = cell(x_t, list(hidden))
        return out, tuple(hidden)

    zero_out = tf.zeros([tf.shape(inputs)[1], cell.units], tf.float32)
    outputs, states = tf.scan(step, (inputs, first), initializer=(zero_out, tuple(state)))
    return outputs, tuple(s[-1] for s in states)
