"""The runner <-> server wire format: round trips, every validation error, and fuzzing.

The fuzz tests hold the decoders to their contract at a network boundary: whatever bytes
arrive, the result is either a valid message or a WireError, never another exception.
"""

from __future__ import annotations

import dataclasses
import re
import struct

import numpy as np
import pytest
from dm_env import specs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seed_agents.inference.protocol import FIRST, LAST, MID, StepBatch
from seed_agents.inference.wire import (
    MAX_MESSAGE_BYTES,
    MAX_STRING_BYTES,
    PROTOCOL_VERSION,
    Hello,
    MessageKind,
    WireError,
    action_spec_of,
    decode_actions,
    decode_hello,
    decode_step_batch,
    encode_actions,
    encode_hello,
    encode_step_batch,
    hello_from_specs,
    message_kind,
)

DTYPES = [np.bool_, np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_batch(k: int, shape: tuple[int, ...], dtype, seed: int = 0) -> StepBatch:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        obs = rng.integers(0, 2, (k, *shape)).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        obs = rng.integers(info.min, info.max, (k, *shape), dtype=dtype, endpoint=True)
    else:
        obs = rng.normal(size=(k, *shape)).astype(dtype)
    return StepBatch(
        observation=obs,
        reward=rng.normal(size=k).astype(np.float32),
        discount=rng.uniform(0, 1, k).astype(np.float32),
        step_type=rng.choice([FIRST, MID, LAST], k).astype(np.uint8),
    )


def assert_batches_equal(a: StepBatch, b: StepBatch) -> None:
    for name in ("observation", "reward", "discount", "step_type"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)


def patch(message: bytes, offset: int, fmt: str, *values) -> bytes:
    """`message` with `values` packed (little-endian) at `offset`."""
    out = bytearray(message)
    struct.pack_into("<" + fmt, out, offset, *values)
    return bytes(out)


def continuous_hello(**overrides) -> Hello:
    return hello(**dict(dict(num_actions=0, action_shape=(3,), action_dtype=np.float32),
                        **overrides))


def hello(**overrides) -> Hello:
    fields = dict(
        runner_id="runner-3",
        run_id="run-2024",
        num_envs=4,
        observation_shape=(84, 84, 4),
        observation_dtype=np.uint8,
        num_actions=6,
    )
    fields.update(overrides)
    return Hello(**fields)


def raises(message: str):
    return pytest.raises(WireError, match=re.escape(message))


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 64])
@pytest.mark.parametrize(
    "shape, dtype",
    [((4,), dt) for dt in DTYPES]
    + [((84, 84, 4), np.uint8), ((), np.float32), ((1,) * 8, np.int8)],
)
def test_step_batch_round_trip(k, shape, dtype):
    batch = make_batch(k, shape, dtype, seed=k)
    message = encode_step_batch(batch)
    decoded = decode_step_batch(message, k, shape, dtype)
    assert_batches_equal(decoded, batch)
    assert message_kind(message) == MessageKind.STEP_BATCH
    # Zero-copy, read-only views over the message; aligned thanks to the padding.
    for array in (decoded.observation, decoded.reward, decoded.step_type):
        assert not array.flags.owndata and not array.flags.writeable and array.flags.aligned


def test_step_batch_byte_layout():
    batch = StepBatch(
        observation=np.arange(6, dtype=np.float32).reshape(2, 3),
        reward=np.array([1.5, -2.0], np.float32),
        discount=np.array([1.0, 0.0], np.float32),
        step_type=np.array([FIRST, LAST], np.uint8),
    )
    expected = b"".join(
        [
            b"SA",
            bytes([PROTOCOL_VERSION, MessageKind.STEP_BATCH]),
            struct.pack("<IBBH", 2, 7, 1, 0),  # K, float32 code, ndim, reserved.
            struct.pack("<I", 3),  # dims.
            struct.pack("<2f", 1.5, -2.0),
            struct.pack("<2f", 1.0, 0.0),
            bytes([0, 2]),
            bytes(6),  # 16 + 18 = 34 bytes so far: zero padding to 40.
            np.arange(6, dtype="<f4").tobytes(),
        ]
    )
    assert encode_step_batch(batch) == expected


def test_step_batch_encoding_accepts_strided_and_big_endian_observations():
    batch = make_batch(5, (6,), np.float32)
    for obs in (batch.observation[:, ::2], batch.observation[:, :3].astype(">f4")):
        strided = StepBatch(obs, batch.reward, batch.discount, batch.step_type)
        decoded = decode_step_batch(encode_step_batch(strided), 5, (3,), np.float32)
        np.testing.assert_array_equal(decoded.observation, obs)


def test_decoders_accept_bytearray_and_memoryview():
    batch = make_batch(3, (2, 2), np.float32)
    message = encode_step_batch(batch)
    for data in (bytearray(message), memoryview(message)):
        assert_batches_equal(decode_step_batch(data, 3, (2, 2), np.float32), batch)
    actions = encode_actions(np.array([0, 1, 2]))
    np.testing.assert_array_equal(decode_actions(memoryview(actions), 3, 3), [0, 1, 2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_hello_round_trip(dtype):
    sent = hello(observation_dtype=dtype, observation_shape=[3, 2], runner_id="r\u00e9-\u96ea")
    message = encode_hello(sent)
    assert message_kind(message) == MessageKind.HELLO
    received = decode_hello(message)
    assert received == sent
    assert received.observation_shape == (3, 2) and received.observation_dtype == dtype


def test_hello_round_trip_edge_values():
    for sent in (
        hello(runner_id="", run_id="", observation_shape=()),
        hello(runner_id="x" * MAX_STRING_BYTES, run_id="\u00e9" * (MAX_STRING_BYTES // 2)),
        hello(num_envs=2**31 - 1, num_actions=2**31 - 1, observation_shape=(2**31 - 1,) * 8),
        continuous_hello(action_shape=(2**31 - 1,) * 8),
        continuous_hello(action_shape=()),
    ):
        assert decode_hello(encode_hello(sent)) == sent


def test_continuous_hello_round_trip():
    sent = continuous_hello(action_shape=[6])
    received = decode_hello(encode_hello(sent))
    assert received == sent
    assert received.action_shape == (6,) and received.action_dtype == np.float32
    assert received.num_actions == 0
    # The defaults are a discrete action spec.
    discrete = decode_hello(encode_hello(hello()))
    assert discrete.action_shape == () and discrete.action_dtype == np.int32


def test_hello_from_dm_env_specs():
    obs = specs.Array((4,), np.float32)
    discrete = hello_from_specs("r", "run", 2, obs, specs.DiscreteArray(5, dtype=np.int64))
    assert (discrete.num_actions, discrete.action_shape, discrete.action_dtype) == (
        5, (), np.int32)
    continuous = hello_from_specs("r", "run", 2, obs,
                                  specs.BoundedArray((3,), np.float32, -1.0, 1.0))
    assert (continuous.num_actions, continuous.action_shape, continuous.action_dtype) == (
        0, (3,), np.float32)
    assert continuous.observation_shape == (4,) and continuous.num_envs == 2
    assert action_spec_of(specs.BoundedArray((2,), np.float64, -1.0, 1.0))[0] == np.float32
    for bad in (specs.Array((2,), np.int32), specs.Array((), np.bool_)):
        with pytest.raises(ValueError, match="neither discrete"):
            action_spec_of(bad)


@pytest.mark.parametrize("k", [1, 64])
def test_actions_round_trip(k):
    actions = np.arange(k, dtype=np.int64) % 6
    message = encode_actions(actions)
    assert message_kind(message) == MessageKind.ACTIONS
    assert len(message) == 12 + 4 * k
    decoded = decode_actions(message, k, num_actions=6)
    assert decoded.dtype == np.int32
    np.testing.assert_array_equal(decoded, actions)
    np.testing.assert_array_equal(decode_actions(message, k), actions)


@pytest.mark.parametrize("shape", [(1,), (3,), (2, 2), ()])
def test_continuous_actions_round_trip(shape):
    actions = np.random.default_rng(0).uniform(-1, 1, (5, *shape))
    message = encode_actions(actions)  # float64 in, float32 on the wire
    assert len(message) == 12 + 4 * len(shape) + 4 * actions.size
    decoded = decode_actions(message, 5, action_shape=shape, action_dtype=np.float32)
    assert decoded.dtype == np.float32 and decoded.shape == (5, *shape)
    assert not decoded.flags.writeable and decoded.flags.aligned
    np.testing.assert_array_equal(decoded, actions.astype(np.float32))


def test_actions_byte_layout():
    assert encode_actions(np.array([3, 1])) == b"".join(
        [b"SA", bytes([PROTOCOL_VERSION, MessageKind.ACTIONS]),
         struct.pack("<IBBH", 2, 4, 0, 0), struct.pack("<2i", 3, 1)])
    assert encode_actions(np.array([[0.5], [-1.0]], np.float32)) == b"".join(
        [b"SA", bytes([PROTOCOL_VERSION, MessageKind.ACTIONS]),
         struct.pack("<IBBH", 2, 7, 1, 0), struct.pack("<I", 1), struct.pack("<2f", 0.5, -1)])


# -- header errors -----------------------------------------------------------------------


def test_wire_error_is_a_value_error():
    assert issubclass(WireError, ValueError)


def test_header_errors():
    message = encode_actions(np.array([1, 2]))
    with raises("bad magic b'XY'"):
        message_kind(b"XY" + message[2:])
    with raises(f"protocol version 3 is not supported: this end speaks {PROTOCOL_VERSION}"):
        message_kind(patch(message, 2, "B", 3))
    with raises("protocol version 1 is not supported: this end speaks 2"):
        decode_hello(patch(encode_hello(hello()), 2, "B", 1))
    with raises("unknown message kind 9"):
        message_kind(patch(message, 3, "B", 9))
    with raises("unknown message kind 0"):
        decode_actions(patch(message, 3, "B", 0), 2)
    with raises("message truncated: 2 bytes, expected at least 4"):
        message_kind(message[:2])
    with raises("message truncated: 0 bytes"):
        decode_hello(b"")


def test_each_decoder_rejects_the_other_kinds():
    batch = encode_step_batch(make_batch(2, (3,), np.float32))
    with raises("expected a HELLO message, got STEP_BATCH"):
        decode_hello(batch)
    with raises("expected a ACTIONS message, got STEP_BATCH"):
        decode_actions(batch, 2)
    with raises("expected a STEP_BATCH message, got HELLO"):
        decode_step_batch(encode_hello(hello()), 4, (84, 84, 4), np.uint8)


# -- step batch errors -------------------------------------------------------------------

# Offsets in a step batch message with a 1-D observation of shape (3,) and K = 2.
_K_AT, _CODE_AT, _NDIM_AT, _RESERVED_AT, _DIMS_AT = 4, 8, 9, 10, 12
_REWARD_AT = 16
_DISCOUNT_AT = _REWARD_AT + 8
_STEP_TYPE_AT = _DISCOUNT_AT + 8
_OBS_AT = 40


@pytest.fixture
def batch_message() -> bytes:
    return encode_step_batch(make_batch(2, (3,), np.float32))


def decode(message: bytes, **overrides) -> StepBatch:
    args = dict(num_envs=2, observation_shape=(3,), observation_dtype=np.float32)
    args.update(overrides)
    return decode_step_batch(message, **args)


def test_step_batch_count_dtype_and_shape_mismatches(batch_message):
    with raises("batch has 2 environments, expected 3"):
        decode(batch_message, num_envs=3)
    with raises("observation dtype float32 does not match the spec's uint8"):
        decode(batch_message, observation_dtype=np.uint8)
    with raises("observation shape (3,) does not match the spec's (4,)"):
        decode(batch_message, observation_shape=(4,))
    with raises("observation shape (3,) does not match the spec's (3, 1)"):
        decode(batch_message, observation_shape=(3, 1))
    image = encode_step_batch(make_batch(1, (84, 84, 3), np.uint8))
    with raises("observation shape (84, 84, 3) does not match the spec's (84, 84, 4)"):
        decode_step_batch(image, 1, (84, 84, 4), np.uint8)


def test_step_batch_length_errors(batch_message):
    n = len(batch_message)
    assert n == _OBS_AT + 2 * 3 * 4
    with raises(f"message truncated: {n - 1} bytes, expected {n}"):
        decode(batch_message[:-1])
    with raises(f"message truncated: {_OBS_AT} bytes, expected {n}"):
        decode(batch_message[:_OBS_AT])
    with raises("message truncated: 10 bytes, expected at least 12"):
        decode(batch_message[:10])
    with raises("message truncated: 14 bytes, expected at least 16"):
        decode(batch_message[:14])
    with raises(f"3 trailing bytes: {n + 3} bytes, expected {n}"):
        decode(batch_message + b"abc")


def test_step_batch_header_field_errors(batch_message):
    with raises("unknown observation dtype code 42"):
        decode(patch(batch_message, _CODE_AT, "B", 42))
    with raises("unknown observation dtype code 0"):
        decode(patch(batch_message, _CODE_AT, "B", 0))
    with raises("observation ndim 9 exceeds the maximum of 8"):
        decode(patch(batch_message, _NDIM_AT, "B", 9))
    with raises("reserved header field is 1, must be 0"):
        decode(patch(batch_message, _RESERVED_AT, "H", 1))
    with raises("observation dimension 0 is 2147483648, must be < 2**31"):
        decode(patch(batch_message, _DIMS_AT, "I", 2**31))
    with raises("padding before the observation is not zero"):
        decode(patch(batch_message, _OBS_AT - 1, "B", 1))


def test_step_batch_oversized_claims_are_rejected_before_anything_else(batch_message):
    with raises(f"more than the limit of {MAX_MESSAGE_BYTES}"):
        decode(patch(batch_message, _K_AT, "I", 2**32 - 1))
    with raises(f"more than the limit of {MAX_MESSAGE_BYTES}"):
        decode(patch(batch_message, _DIMS_AT, "I", 2**31 - 1))
    claims = 16 + 9 * 2 + 6 + 2 * 3 * 4
    with raises(f"message claims {claims} bytes, more than the limit of 63"):
        decode(batch_message, max_message_bytes=63)
    with pytest.raises(ValueError, match="more than the limit 63"):
        encode_step_batch(make_batch(2, (3,), np.float32), max_message_bytes=63)


def test_step_batch_value_errors():
    batch = make_batch(4, (3,), np.float32)

    def encoded(name: str, index: int, value) -> bytes:
        column = getattr(batch, name).copy()
        column[index] = value
        fields = dict(vars(batch), **{name: column})
        return encode_step_batch(StepBatch(**fields))

    def decode4(message):
        return decode_step_batch(message, 4, (3,), np.float32)

    with raises("step_type[3] is 7, must be FIRST (0), MID (1) or LAST (2)"):
        decode4(encoded("step_type", 3, 7))
    with raises("step_type[0] is 3"):
        decode4(encoded("step_type", 0, 3))
    with raises("reward[1] is nan, must be finite"):
        decode4(encoded("reward", 1, np.nan))
    with raises("reward[2] is inf, must be finite"):
        decode4(encoded("reward", 2, np.inf))
    with raises("reward[0] is -inf, must be finite"):
        decode4(encoded("reward", 0, -np.inf))
    with raises("discount[2] is nan, must be finite"):
        decode4(encoded("discount", 2, np.nan))
    with raises("discount[1] is 1.5, must be in [0, 1]"):
        decode4(encoded("discount", 1, 1.5))
    with raises("discount[3] is -0.25, must be in [0, 1]"):
        decode4(encoded("discount", 3, -0.25))
    # The bounds themselves are valid, and so are the largest finite rewards.
    big = np.finfo(np.float32).max
    valid = StepBatch(
        batch.observation,
        np.array([big, -big, 0, 1], np.float32),
        np.array([0, 1, 0, 1], np.float32),
        np.array([FIRST, MID, LAST, MID], np.uint8),
    )
    assert_batches_equal(decode4(encode_step_batch(valid)), valid)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_observations_must_be_finite(dtype):
    batch = make_batch(3, (2, 2), dtype)
    for bad in (np.nan, np.inf, -np.inf):
        observation = batch.observation.copy()
        observation[2, 1, 0] = bad
        message = encode_step_batch(StepBatch(observation, batch.reward, batch.discount,
                                              batch.step_type))
        with raises(f"observation[2] holds {bad}: float observations must be finite"):
            decode_step_batch(message, 3, (2, 2), dtype)
    # The largest finite values are valid.
    huge = np.full((3, 2, 2), np.finfo(dtype).max, dtype)
    valid = StepBatch(huge, batch.reward, batch.discount, batch.step_type)
    assert_batches_equal(decode_step_batch(encode_step_batch(valid), 3, (2, 2), dtype), valid)


def test_bool_observations_must_hold_zero_or_one():
    message = encode_step_batch(make_batch(2, (3,), np.bool_))
    with raises("bool observation holds a byte other than 0 or 1"):
        decode_step_batch(patch(message, _OBS_AT + 4, "B", 2), 2, (3,), np.bool_)


def test_step_batch_encoding_errors_are_plain_value_errors():
    batch = make_batch(2, (3,), np.float32)
    bad = [
        (dict(observation=batch.observation.astype(np.complex64)), "not supported"),
        (dict(observation=np.zeros((0, 3), np.float32)), "K>=1"),
        (dict(observation=np.zeros((2,) + (1,) * 9, np.float32)), "more than the maximum 8"),
        (dict(reward=batch.reward.astype(np.float64)), "reward must be float32[2]"),
        (dict(discount=batch.discount[:1]), "discount must be float32[2]"),
        (dict(step_type=batch.step_type.astype(np.int32)), "step_type must be uint8[2]"),
    ]
    for overrides, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)) as info:
            encode_step_batch(StepBatch(**dict(vars(batch), **overrides)))
        assert not isinstance(info.value, WireError)


def test_decode_step_batch_rejects_bad_expectations(batch_message):
    with pytest.raises(ValueError, match="not supported"):
        decode(batch_message, observation_dtype=np.complex64)
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        decode(batch_message, num_envs=0)


# -- hello errors ------------------------------------------------------------------------

# Offsets in a HELLO message.
_NUM_ENVS_AT, _NUM_ACTIONS_AT, _H_CODE_AT, _H_NDIM_AT, _RUNNER_LEN_AT, _RUN_LEN_AT = (
    4,
    8,
    12,
    13,
    14,
    16,
)
_H_ACTION_CODE_AT, _H_ACTION_NDIM_AT = 18, 19
_H_DIMS_AT = 20


def raw_hello(runner_id: bytes, run_id: bytes = b"run", num_actions: int = 3,
              action: tuple[int, tuple[int, ...]] = (4, ())) -> bytes:
    """A HELLO built by hand: observation float32 (5,), actions (code, shape)."""
    code, shape = action
    return b"".join(
        [
            b"SA",
            bytes([PROTOCOL_VERSION, MessageKind.HELLO]),
            struct.pack("<IIBBHHBB", 2, num_actions, 7, 1, len(runner_id), len(run_id), code,
                        len(shape)),
            struct.pack("<I", 5),
            struct.pack(f"<{len(shape)}I", *shape),
            runner_id,
            run_id,
        ]
    )


def test_hello_byte_layout():
    sent = hello(
        runner_id="ab",
        run_id="run",
        num_envs=2,
        num_actions=3,
        observation_shape=(5,),
        observation_dtype=np.float32,
    )
    assert encode_hello(sent) == raw_hello(b"ab")
    continuous = dataclasses.replace(sent, num_actions=0, action_shape=(6,),
                                     action_dtype=np.float32)
    assert encode_hello(continuous) == raw_hello(b"ab", num_actions=0, action=(7, (6,)))


def test_hello_string_errors():
    with raises("runner_id is not valid UTF-8: invalid start byte at byte 1"):
        decode_hello(raw_hello(b"a\xff"))
    with raises("run_id is not valid UTF-8: unexpected end of data at byte 0"):
        decode_hello(raw_hello(b"ok", b"\xc3"))
    too_long = raw_hello(b"x" * (MAX_STRING_BYTES + 1))
    with raises(f"runner_id is {MAX_STRING_BYTES + 1} bytes, more than the maximum 256"):
        decode_hello(too_long)
    with raises("run_id is 65535 bytes, more than the maximum 256"):
        decode_hello(patch(raw_hello(b"a"), _RUN_LEN_AT, "H", 65535))
    with pytest.raises(ValueError, match="runner_id is 257 bytes of UTF-8"):
        encode_hello(hello(runner_id="x" * 257))
    with pytest.raises(ValueError, match="run_id is 258 bytes of UTF-8"):
        encode_hello(hello(run_id="\u00e9" * 129))  # 129 characters, 258 bytes.


def test_hello_field_errors():
    message = raw_hello(b"ab")
    with raises("num_envs must be in [1, 2**31), got 0"):
        decode_hello(patch(message, _NUM_ENVS_AT, "I", 0))
    with raises("discrete actions need num_actions in [1, 2**31), got 2147483648"):
        decode_hello(patch(message, _NUM_ACTIONS_AT, "I", 2**31))
    with raises("discrete actions need num_actions in [1, 2**31), got 0"):
        decode_hello(patch(message, _NUM_ACTIONS_AT, "I", 0))
    with raises("unknown observation dtype code 9"):
        decode_hello(patch(message, _H_CODE_AT, "B", 9))
    with raises("observation ndim 200 exceeds the maximum of 8"):
        decode_hello(patch(message, _H_NDIM_AT, "B", 200))
    with raises("observation dimension 0 is 4294967295, must be < 2**31"):
        decode_hello(patch(message, _H_DIMS_AT, "I", 2**32 - 1))
    with raises(f"message truncated: {len(message) - 1} bytes, expected {len(message)}"):
        decode_hello(message[:-1])
    with raises("message truncated: 10 bytes, expected at least 20"):
        decode_hello(message[:10])
    with raises(f"1 trailing bytes: {len(message) + 1} bytes"):
        decode_hello(message + b"\0")
    with pytest.raises(ValueError, match="num_envs must be in"):
        encode_hello(hello(num_envs=0))
    with pytest.raises(ValueError, match="not supported"):
        encode_hello(hello(observation_dtype=np.uint16))


def test_hello_action_spec_errors():
    continuous = raw_hello(b"ab", num_actions=0, action=(7, (6,)))
    assert decode_hello(continuous).action_shape == (6,)
    for at, fmt, value, problem in [
        (_NUM_ACTIONS_AT, "I", 4, "continuous (float32) actions must have num_actions 0, got 4"),
        (_H_ACTION_CODE_AT, "B", 4, "discrete (int32) actions must have shape (), got (6,)"),
        (_H_ACTION_CODE_AT, "B", 8, "action dtype float64 is not supported: int32 (discrete)"),
        (_H_ACTION_CODE_AT, "B", 0, "unknown action dtype code 0"),
        (_H_ACTION_NDIM_AT, "B", 9, "action ndim 9 exceeds the maximum of 8"),
        (_H_DIMS_AT + 4, "I", 0, "continuous action shape (0,) has an empty dimension"),
        (_H_DIMS_AT + 4, "I", 2**31, "action dimension 0 is 2147483648, must be < 2**31"),
    ]:
        with raises(problem):
            decode_hello(patch(continuous, at, fmt, value))
    with raises(f"message truncated: {len(continuous) - 2} bytes"):
        decode_hello(continuous[:-2])
    for bad, problem in ((hello(action_dtype=np.int64), "action dtype int64 is not supported"),
                         (hello(action_shape=(2,)), "must have shape ()"),
                         (continuous_hello(num_actions=2), "must have num_actions 0"),
                         (hello(num_actions=0), "need num_actions in [1, 2**31)")):
        with pytest.raises(ValueError, match=re.escape(problem)) as info:
            encode_hello(bad)
        assert not isinstance(info.value, WireError)


# -- actions errors ----------------------------------------------------------------------


def test_actions_errors():
    message = encode_actions(np.array([0, 5, 2], np.int32))
    with raises("message has 3 actions, expected 4"):
        decode_actions(message, 4)
    with raises("action 5 at index 1 is out of range [0, 5)"):
        decode_actions(message, 3, num_actions=5)
    with raises("action -1 at index 2 is out of range [0, 6)"):
        decode_actions(encode_actions(np.array([0, 1, -1])), 3, num_actions=6)
    with raises("message truncated: 19 bytes, expected 24"):
        decode_actions(message[:-5], 3)
    with raises("message truncated: 6 bytes, expected at least 12"):
        decode_actions(message[:6], 3)
    with raises("2 trailing bytes: 26 bytes, expected 24"):
        decode_actions(message + b"\0\0", 3)
    with raises(f"message claims {12 + 4 * 2**30} bytes, more than the limit"):
        decode_actions(patch(message, 4, "I", 2**30), 2**30)
    with raises("reserved header field is 1, must be 0"):
        decode_actions(patch(message, 10, "H", 1), 3)
    with raises("unknown action dtype code 99"):
        decode_actions(patch(message, 8, "B", 99), 3)
    with raises("action ndim 9 exceeds the maximum of 8"):
        decode_actions(patch(message, 9, "B", 9), 3)
    with raises("message truncated: 12 bytes, expected at least 16"):
        decode_actions(patch(message, 9, "B", 1)[:12], 3)
    with raises("action dtype float32 does not match the expected int32"):
        decode_actions(encode_actions(np.zeros(3, np.float32)), 3)


def test_continuous_actions_errors():
    message = encode_actions(np.zeros((3, 2), np.float32))

    def decode3(data, shape=(2,), dtype=np.float32):
        return decode_actions(data, 3, action_shape=shape, action_dtype=dtype)

    with raises("action dtype int32 does not match the expected float32"):
        decode3(encode_actions(np.zeros(3, np.int32)), shape=())
    with raises("action shape (2,) does not match the expected (3,)"):
        decode3(message, shape=(3,))
    with raises("action shape (2,) does not match the expected ()"):
        decode3(message, shape=())
    with raises("action dimension 0 is 4294967295, must be < 2**31"):
        decode3(patch(message, 12, "I", 2**32 - 1))
    with raises("more than the limit"):
        decode3(patch(message, 12, "I", 2**31 - 1))
    for bad in (np.nan, np.inf, -np.inf):
        with raises(f"action 1 is [0.0, {bad}]: continuous actions must be finite"):
            decode3(patch(message, 16 + 12, "f", bad))
    with pytest.raises(ValueError, match="not supported"):
        decode3(message, dtype=np.float64)


def test_actions_encoding_errors():
    with pytest.raises(ValueError, match="must fit in int32"):
        encode_actions(np.array([0, 2**31], np.int64))
    with pytest.raises(ValueError, match="must be integers or floats"):
        encode_actions(np.array([1j, 1.0]))
    with pytest.raises(ValueError, match=re.escape("discrete actions must be [K]")):
        encode_actions(np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match=re.escape("actions must be [K>=1, ...]")):
        encode_actions(np.zeros(0, np.int32))
    for bad in (np.nan, np.inf, 1e39):  # 1e39 overflows float32
        with pytest.raises(ValueError, match="must be finite"):
            encode_actions(np.array([[0.0], [bad]]))


# -- fuzzing -----------------------------------------------------------------------------

_FUZZ_SHAPE, _FUZZ_K, _FUZZ_ACTIONS = (3,), 2, 4


def assert_valid_batch(batch: StepBatch, k: int, shape, dtype) -> None:
    assert batch.observation.shape == (k, *shape) and batch.observation.dtype == dtype
    assert batch.reward.shape == batch.discount.shape == batch.step_type.shape == (k,)
    assert np.isfinite(batch.reward).all()
    assert ((batch.discount >= 0) & (batch.discount <= 1)).all()
    assert set(batch.step_type.tolist()) <= {0, 1, 2}
    if batch.observation.dtype == np.bool_:
        assert set(batch.observation.view(np.uint8).ravel().tolist()) <= {0, 1}
    if batch.observation.dtype.kind == "f":
        assert np.isfinite(batch.observation).all()


def decode_any(data: bytes, k: int, shape, dtype, num_actions: int,
               action_shape=(3,)) -> None:
    """Every decoder on `data`: each either returns something valid or raises WireError.

    Actions are tried both ways: discrete with `num_actions`, continuous float32 of
    `action_shape`."""
    try:
        message_kind(data)
    except WireError:
        pass
    try:
        assert_valid_batch(decode_step_batch(data, k, shape, dtype), k, shape, dtype)
    except WireError:
        pass
    try:
        actions = decode_actions(data, k, num_actions)
        assert actions.shape == (k,) and ((actions >= 0) & (actions < num_actions)).all()
    except WireError:
        pass
    try:
        actions = decode_actions(data, k, action_shape=action_shape, action_dtype=np.float32)
        assert actions.shape == (k, *action_shape) and actions.dtype == np.float32
        assert np.isfinite(actions).all()
    except WireError:
        pass
    try:
        decoded = decode_hello(data)
        assert len(decoded.observation_shape) <= 8 and decoded.num_envs >= 1
        assert len(decoded.runner_id.encode()) <= MAX_STRING_BYTES
        assert len(decoded.action_shape) <= 8
        if decoded.action_dtype == np.int32:
            assert decoded.action_shape == () and decoded.num_actions >= 1
        else:
            assert decoded.action_dtype == np.float32 and decoded.num_actions == 0
            assert all(d >= 1 for d in decoded.action_shape)
    except WireError:
        pass


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_arbitrary_bytes(data):
    decode_any(data, _FUZZ_K, _FUZZ_SHAPE, np.float32, _FUZZ_ACTIONS)


@FUZZ
@given(st.sampled_from(list(MessageKind) + [0, 4, 255]), st.binary(max_size=2048))
def test_fuzz_valid_header_then_arbitrary_bytes(kind, body):
    data = b"SA" + bytes([PROTOCOL_VERSION, kind]) + body
    decode_any(data, _FUZZ_K, _FUZZ_SHAPE, np.float32, _FUZZ_ACTIONS)


@st.composite
def valid_messages(draw):
    """A valid message of any kind, with the expectations a receiver would decode it with."""
    k = draw(st.integers(1, 6))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    continuous = draw(st.booleans())
    num_actions = 0 if continuous else draw(st.integers(1, 10))
    action_shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2))) if continuous else ()
    kind = draw(st.sampled_from(list(MessageKind)))
    if kind == MessageKind.STEP_BATCH:
        message = encode_step_batch(make_batch(k, shape, dtype, seed=draw(st.integers(0, 99))))
    elif kind == MessageKind.ACTIONS and continuous:
        message = encode_actions(np.random.default_rng(draw(st.integers(0, 99))).uniform(
            -1, 1, (k, *action_shape)).astype(np.float32))
    elif kind == MessageKind.ACTIONS:
        message = encode_actions(
            np.array(draw(st.lists(st.integers(0, num_actions - 1), min_size=k, max_size=k)))
        )
    else:
        message = encode_hello(
            Hello(
                runner_id=draw(st.text(max_size=20)),
                run_id=draw(st.text(max_size=20)),
                num_envs=k,
                observation_shape=shape,
                observation_dtype=dtype,
                num_actions=num_actions,
                action_shape=action_shape,
                action_dtype=np.float32 if continuous else np.int32,
            )
        )
    return kind, message, k, shape, dtype, num_actions, action_shape


@st.composite
def mutations(draw, size: int):
    """A few random edits: byte flips, truncations, insertions and deletions."""
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, size))
        if op == "flip":
            edits.append((op, at, draw(st.integers(1, 255))))
        elif op == "insert":
            edits.append((op, at, draw(st.binary(min_size=1, max_size=16))))
        else:
            edits.append((op, at, draw(st.integers(1, 16))))
    return edits


def mutate(message: bytes, edits) -> bytes:
    data = bytearray(message)
    for op, at, arg in edits:
        at = min(at, len(data))
        if op == "flip" and at < len(data):
            data[at] ^= arg
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = arg
        elif op == "delete":
            del data[at : at + arg]
    return bytes(data)


@FUZZ
@given(st.data())
def test_fuzz_mutated_valid_messages(data):
    kind, message, k, shape, dtype, num_actions, action_shape = data.draw(valid_messages())
    assert message_kind(message) == kind  # Unmutated: decodes with its own decoder.
    if kind == MessageKind.STEP_BATCH:
        assert_valid_batch(decode_step_batch(message, k, shape, dtype), k, shape, dtype)
    elif kind == MessageKind.ACTIONS and num_actions == 0:
        decoded = decode_actions(message, k, action_shape=action_shape, action_dtype=np.float32)
        assert decoded.shape == (k, *action_shape)
    elif kind == MessageKind.ACTIONS:
        assert decode_actions(message, k, num_actions).shape == (k,)
    else:
        decoded = decode_hello(message)
        assert (decoded.num_actions, decoded.action_shape) == (num_actions, action_shape)
    mutated = mutate(message, data.draw(mutations(len(message))))
    decode_any(mutated, k, shape, dtype, max(num_actions, 1), action_shape)
