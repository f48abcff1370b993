"""The bytes that travel between environment runners and the inference server.

The gRPC stream carries raw `bytes` (no protobuf codegen), so this module *is* the
message schema. It is written for a network boundary: a decoder never trusts a length,
a count or a code it reads, never unpickles, and never allocates on a peer's say-so.
Every malformed message raises `WireError` naming exactly what was wrong, so a server
can drop one misbehaving runner with a useful log line instead of crashing on an
`IndexError` deep inside numpy.

Only numpy, struct and the standard library are used: runners import this module and
must stay small (no TensorFlow, no Reverb).

Layout (little-endian everywhere). Every message starts with a 4-byte header:

    magic b"SA" | version u8 | kind u8

HELLO (sent once when a stream opens):

    num_envs u32 | num_actions u32 | dtype u8 | ndim u8 | runner_id_len u16 |
    run_id_len u16 | dims u32[ndim] | runner_id utf-8 | run_id utf-8

STEP_BATCH (one per round trip, runner -> server):

    K u32 | dtype u8 | ndim u8 | reserved u16 (0) | dims u32[ndim] |
    reward f32[K] | discount f32[K] | step_type u8[K] | zero padding to a multiple of 8 |
    observation dtype[K, *dims]

ACTIONS (the answer, server -> runner):

    K u32 | action i32[K]

The fixed part of a step batch is 12 + 4 * ndim bytes, so reward and discount start
4-aligned and the padding puts the observation on an 8-byte boundary: `np.frombuffer`
views over a received `bytes` object are then aligned for every supported dtype, which
keeps the server's copy into its batch on numpy's fast path.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import struct
from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

from seed_agents.inference.protocol import StepBatch

__all__ = [
    "MAGIC",
    "MAX_MESSAGE_BYTES",
    "MAX_NDIM",
    "MAX_STRING_BYTES",
    "PROTOCOL_VERSION",
    "Hello",
    "MessageKind",
    "WireError",
    "decode_actions",
    "decode_hello",
    "decode_step_batch",
    "encode_actions",
    "encode_hello",
    "encode_step_batch",
    "message_kind",
]

MAGIC = b"SA"
PROTOCOL_VERSION = 1
# Larger than any sane step batch (16 Atari frames are 450 KiB) yet small enough that a
# corrupt count cannot make either side reserve gigabytes. gRPC has its own receive limit
# (4 MiB by default); the server must raise it to match if it expects bigger batches.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_NDIM = 8
MAX_STRING_BYTES = 256
_MAX_DIM = 2**31  # Exclusive: every dimension and count must fit a signed 32-bit int.


class WireError(ValueError):
    """A received message is malformed; the message says exactly how.

    Raised only for bytes that came from a peer. Encoding a bad value is a bug on this
    side and raises a plain ValueError instead, so a server can tell "drop this runner"
    from "fix my code".
    """


class MessageKind(enum.IntEnum):
    HELLO = 1
    STEP_BATCH = 2
    ACTIONS = 3


_KINDS = {kind.value: kind for kind in MessageKind}

# Codes are part of the protocol: never renumber, only append. 0 stays invalid so that a
# zeroed buffer is never a valid message.
_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("?"),
    2: np.dtype("u1"),
    3: np.dtype("i1"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f2"),
    7: np.dtype("<f4"),
    8: np.dtype("<f8"),
}
_CODES: dict[np.dtype, int] = {dtype: code for code, dtype in _DTYPES.items()}

_HEADER = struct.Struct("<2sBB")
_HELLO_FIXED = struct.Struct("<IIBBHH")
_BATCH_FIXED = struct.Struct("<IBBH")
_COUNT = struct.Struct("<I")
_DIMS = [struct.Struct(f"<{n}I") for n in range(MAX_NDIM + 1)]
_HELLO_PREFIX = _HEADER.size + _HELLO_FIXED.size
_BATCH_PREFIX = _HEADER.size + _BATCH_FIXED.size
_ACTIONS_PREFIX = _HEADER.size + _COUNT.size
_PADDING = bytes(8)
_F32 = np.dtype("<f4")
_I32 = np.dtype("<i4")
_U8 = np.dtype("u1")
_BOOL_CODE = _CODES[np.dtype("?")]
_STEP_TYPES = bytes([0, 1, 2])  # dm_env FIRST, MID, LAST.


@dataclasses.dataclass(frozen=True)
class Hello:
    """What a runner announces when its stream opens: who it is and what it will send."""

    runner_id: str
    run_id: str
    num_envs: int
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int

    def __post_init__(self) -> None:
        # Normalised so that equality holds whatever the caller passed (a list, np.float32).
        object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        object.__setattr__(self, "observation_dtype", np.dtype(self.observation_dtype))


# -- shared helpers ----------------------------------------------------------------------


def _wire_dtype(dtype: DTypeLike) -> tuple[int, np.dtype] | None:
    """The code and little-endian wire dtype of `dtype`, or None when it is unsupported."""
    wire = np.dtype(dtype).newbyteorder("<")  # A no-op for bool/u1/i1 ("|" byte order).
    code = _CODES.get(wire)
    return None if code is None else (code, wire)


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_NDIM:
        raise ValueError(f"{what} has {len(shape)} dimensions, more than the maximum {MAX_NDIM}")
    if any(not 0 <= d < _MAX_DIM for d in shape):
        raise ValueError(f"{what} {shape} has a dimension outside [0, 2**31)")
    return shape


def _header(kind: MessageKind) -> bytes:
    return _HEADER.pack(MAGIC, PROTOCOL_VERSION, kind)


def _buffer(data: bytes) -> bytes | bytearray | memoryview:
    # Any C-contiguous bytes-like object works; a memoryview is flattened to bytes so that
    # len() counts bytes and slicing compares with bytes.
    if isinstance(data, memoryview) and (data.ndim != 1 or data.format != "B"):
        return data.cast("B")
    return data


def _read_kind(buf: bytes | bytearray | memoryview) -> MessageKind:
    n = len(buf)
    if n < _HEADER.size:
        raise WireError(f"message truncated: {n} bytes, expected at least {_HEADER.size}")
    magic, version, kind = _HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not a wire message")
    if version != PROTOCOL_VERSION:
        raise WireError(
            f"unsupported protocol version {version} (this end speaks {PROTOCOL_VERSION})"
        )
    known = _KINDS.get(kind)  # A dict lookup: calling the enum costs more than the decode.
    if known is None:
        raise WireError(f"unknown message kind {kind}")
    return known


def _expect(buf: bytes | bytearray | memoryview, kind: MessageKind, at_least: int) -> int:
    """Checks the header, that the message is a `kind`, and that `at_least` bytes are there."""
    got = _read_kind(buf)
    if got != kind:
        raise WireError(f"expected a {kind.name} message, got {got.name}")
    n = len(buf)
    if n < at_least:
        raise WireError(f"message truncated: {n} bytes, expected at least {at_least}")
    return n


def _check_length(n: int, expected: int) -> None:
    if n < expected:
        raise WireError(f"message truncated: {n} bytes, expected {expected}")
    if n > expected:
        raise WireError(f"{n - expected} trailing bytes: {n} bytes, expected {expected}")


def _check_claim(claimed: int, limit: int) -> None:
    # Compared with Python ints (no overflow) before any size is used for a view or buffer.
    if claimed > limit:
        raise WireError(f"message claims {claimed} bytes, more than the limit of {limit}")


def _read_dims(buf: bytes | bytearray | memoryview, ndim: int, offset: int) -> tuple[int, ...]:
    dims = _DIMS[ndim].unpack_from(buf, offset)
    for i, d in enumerate(dims):
        if d >= _MAX_DIM:
            raise WireError(f"observation dimension {i} is {d}, must be < 2**31")
    return dims


def message_kind(data: bytes) -> MessageKind:
    """Validates the header and returns the kind (an int), so a server can dispatch."""
    return _read_kind(_buffer(data))


# -- HELLO -------------------------------------------------------------------------------


def _utf8(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING_BYTES:
        raise ValueError(f"{what} is {len(raw)} bytes of UTF-8, more than {MAX_STRING_BYTES}")
    return raw


def encode_hello(hello: Hello) -> bytes:
    """Encodes `hello`; raises ValueError for values the wire cannot carry."""
    wire = _wire_dtype(hello.observation_dtype)
    if wire is None:
        raise ValueError(f"observation dtype {hello.observation_dtype} is not supported")
    shape = _check_shape(hello.observation_shape, "observation_shape")
    if not 1 <= hello.num_envs < _MAX_DIM:
        raise ValueError(f"num_envs must be in [1, 2**31), got {hello.num_envs}")
    if not 1 <= hello.num_actions < _MAX_DIM:
        raise ValueError(f"num_actions must be in [1, 2**31), got {hello.num_actions}")
    runner_id = _utf8(hello.runner_id, "runner_id")
    run_id = _utf8(hello.run_id, "run_id")
    fixed = _HELLO_FIXED.pack(
        hello.num_envs, hello.num_actions, wire[0], len(shape), len(runner_id), len(run_id)
    )
    return b"".join(
        [_header(MessageKind.HELLO), fixed, _DIMS[len(shape)].pack(*shape), runner_id, run_id]
    )


def _decode_utf8(raw: bytes | bytearray | memoryview, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"{what} is not valid UTF-8: {e.reason} at byte {e.start}") from None


def decode_hello(data: bytes) -> Hello:
    """Decodes and validates a HELLO message."""
    buf = _buffer(data)
    n = _expect(buf, MessageKind.HELLO, _HELLO_PREFIX)
    num_envs, num_actions, code, ndim, runner_len, run_len = _HELLO_FIXED.unpack_from(
        buf, _HEADER.size
    )
    if ndim > MAX_NDIM:
        raise WireError(f"observation ndim {ndim} exceeds the maximum of {MAX_NDIM}")
    if code not in _DTYPES:
        raise WireError(f"unknown observation dtype code {code}")
    if not 1 <= num_envs < _MAX_DIM:
        raise WireError(f"num_envs must be in [1, 2**31), got {num_envs}")
    if not 1 <= num_actions < _MAX_DIM:
        raise WireError(f"num_actions must be in [1, 2**31), got {num_actions}")
    for what, length in (("runner_id", runner_len), ("run_id", run_len)):
        if length > MAX_STRING_BYTES:
            raise WireError(f"{what} is {length} bytes, more than the maximum {MAX_STRING_BYTES}")
    strings_at = _HELLO_PREFIX + 4 * ndim
    _check_length(n, strings_at + runner_len + run_len)
    dims = _read_dims(buf, ndim, _HELLO_PREFIX)
    return Hello(
        runner_id=_decode_utf8(buf[strings_at : strings_at + runner_len], "runner_id"),
        run_id=_decode_utf8(buf[strings_at + runner_len : n], "run_id"),
        num_envs=num_envs,
        observation_shape=dims,
        observation_dtype=_DTYPES[code].newbyteorder("="),
        num_actions=num_actions,
    )


# -- STEP_BATCH --------------------------------------------------------------------------


def _batch_offsets(num_envs: int, ndim: int) -> tuple[int, int]:
    """(start of reward, start of observation) for a step batch."""
    scalars_at = _BATCH_PREFIX + 4 * ndim
    end = scalars_at + 9 * num_envs  # reward f32, discount f32, step_type u8.
    return scalars_at, (end + 7) & ~7


def _check_column(value: np.ndarray, name: str, dtype: np.dtype, k: int) -> None:
    if value.dtype.newbyteorder("<") != dtype or value.shape != (k,):
        raise ValueError(f"{name} must be {dtype.name}[{k}], got {value.dtype}{list(value.shape)}")


def encode_step_batch(batch: StepBatch, *, max_message_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """Encodes `batch`; raises ValueError when it breaks the StepBatch contract.

    Only structure is checked here (dtypes, shapes, size): the receiver is the trust
    boundary and validates values (step types, finite rewards, discounts in [0, 1]), so
    the runner does not pay for those checks twice.
    """
    obs = batch.observation
    if obs.ndim < 1 or obs.shape[0] < 1:
        raise ValueError(f"observation must be [K>=1, *obs_shape], got shape {obs.shape}")
    wire = _wire_dtype(obs.dtype)
    if wire is None:
        raise ValueError(f"observation dtype {obs.dtype} is not supported")
    code, dtype = wire
    k = obs.shape[0]
    shape = _check_shape(obs.shape[1:], "observation shape")
    _check_column(batch.reward, "reward", _F32, k)
    _check_column(batch.discount, "discount", _F32, k)
    _check_column(batch.step_type, "step_type", _U8, k)
    scalars_at, obs_at = _batch_offsets(k, len(shape))
    total = obs_at + obs.nbytes
    if total > max_message_bytes:
        raise ValueError(f"step batch needs {total} bytes, more than the limit {max_message_bytes}")
    # One copy: bytes.join reads the arrays through the buffer protocol, so nothing is
    # serialised first (measured faster than tobytes() parts or a preallocated bytearray,
    # which needs a second copy to become bytes). The arrays only need to be C-contiguous
    # and little-endian, which they already are on the usual path (no copy then).
    obs = np.ascontiguousarray(obs, dtype=dtype)
    prefix = _header(MessageKind.STEP_BATCH) + _BATCH_FIXED.pack(k, code, len(shape), 0)
    return b"".join(
        [
            prefix,
            _DIMS[len(shape)].pack(*shape),
            np.ascontiguousarray(batch.reward, dtype=_F32),
            np.ascontiguousarray(batch.discount, dtype=_F32),
            np.ascontiguousarray(batch.step_type),
            _PADDING[: obs_at - scalars_at - 9 * k],
            obs,
        ]
    )


def decode_step_batch(
    data: bytes,
    num_envs: int,
    observation_shape: Sequence[int],
    observation_dtype: DTypeLike,
    *,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> StepBatch:
    """Decodes a STEP_BATCH, validating everything against what the runner announced.

    The arrays are zero-copy views over `data` (read-only when `data` is `bytes`): the
    caller copies what it keeps. `num_envs`, `observation_shape` and `observation_dtype`
    are the receiver's expectations (from the spec and the runner's HELLO); a bad one
    is the caller's bug and raises a plain ValueError.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    expected = _wire_dtype(observation_dtype)
    if expected is None:
        raise ValueError(f"observation dtype {np.dtype(observation_dtype)} is not supported")
    expected_shape = tuple(int(d) for d in observation_shape)

    buf = _buffer(data)
    n = _expect(buf, MessageKind.STEP_BATCH, _BATCH_PREFIX)
    k, code, ndim, reserved = _BATCH_FIXED.unpack_from(buf, _HEADER.size)
    if reserved:
        raise WireError(f"reserved header field is {reserved}, must be 0")
    if ndim > MAX_NDIM:
        raise WireError(f"observation ndim {ndim} exceeds the maximum of {MAX_NDIM}")
    if n < _BATCH_PREFIX + 4 * ndim:
        raise WireError(
            f"message truncated: {n} bytes, expected at least {_BATCH_PREFIX + 4 * ndim}"
        )
    dims = _read_dims(buf, ndim, _BATCH_PREFIX)
    dtype = _DTYPES.get(code)
    if dtype is None:
        raise WireError(f"unknown observation dtype code {code}")
    scalars_at, obs_at = _batch_offsets(k, ndim)
    obs_size = k * math.prod(dims)
    total = obs_at + obs_size * dtype.itemsize
    _check_claim(total, max_message_bytes)
    if k != num_envs:
        raise WireError(f"batch has {k} environments, expected {num_envs}")
    if code != expected[0]:
        raise WireError(
            f"observation dtype {dtype.name} does not match the spec's {expected[1].name}"
        )
    if dims != expected_shape:
        raise WireError(f"observation shape {dims} does not match the spec's {expected_shape}")
    _check_length(n, total)
    padding_at = scalars_at + 9 * k
    if buf[padding_at:obs_at] != _PADDING[: obs_at - padding_at]:
        raise WireError("padding before the observation is not zero")

    # The value checks run on every message, so the common (valid) case is kept to a
    # couple of C loops; only a failure pays for finding and naming the culprit.
    st_at = scalars_at + 8 * k
    if bytes(buf[st_at:padding_at]).translate(None, _STEP_TYPES):  # Deletes 0, 1, 2.
        step_type = np.frombuffer(buf, _U8, k, st_at)
        i = int(np.argmax(step_type > 2))
        raise WireError(f"step_type[{i}] is {step_type[i]}, must be FIRST (0), MID (1) or LAST (2)")
    # One view over [reward; discount] checked against per-slot bounds in one pass. NaN
    # fails every comparison, and +-inf fails the reward bound of +-FLT_MAX.
    scalars = np.frombuffer(buf, _F32, 2 * k, scalars_at)
    lo, hi = _scalar_bounds(k)
    if not ((scalars >= lo) & (scalars <= hi)).all():
        _raise_scalar_error(scalars[:k], scalars[k:])
    observation = np.frombuffer(buf, dtype, obs_size, obs_at).reshape(k, *dims)
    if code == _BOOL_CODE and observation.view(_U8).max(initial=0) > 1:
        # Any byte other than 0/1 in a numpy bool array gives inconsistent results.
        raise WireError("bool observation holds a byte other than 0 or 1")
    return StepBatch(
        observation=observation,
        reward=scalars[:k],
        discount=scalars[k:],
        step_type=np.frombuffer(buf, _U8, k, st_at),
    )


@functools.lru_cache(maxsize=64)
def _scalar_bounds(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Bounds for the [reward; discount] view: finite rewards, discounts in [0, 1]."""
    big = np.finfo(np.float32).max
    lo = np.concatenate([np.full(k, -big, _F32), np.zeros(k, _F32)])
    hi = np.concatenate([np.full(k, big, _F32), np.ones(k, _F32)])
    lo.flags.writeable = hi.flags.writeable = False  # Shared by every later call.
    return lo, hi


def _raise_scalar_error(reward: np.ndarray, discount: np.ndarray) -> None:
    for name, values in (("reward", reward), ("discount", discount)):
        finite = np.isfinite(values)
        if not finite.all():
            i = int(np.argmin(finite))
            raise WireError(f"{name}[{i}] is {values[i]}, must be finite")
    i = int(np.argmax((discount < 0) | (discount > 1)))
    raise WireError(f"discount[{i}] is {discount[i]}, must be in [0, 1]")


# -- ACTIONS -----------------------------------------------------------------------------


def encode_actions(actions: np.ndarray) -> bytes:
    """Encodes one action per environment as int32 [K]; raises ValueError otherwise."""
    actions = np.asarray(actions)
    if actions.ndim != 1 or actions.shape[0] < 1:
        raise ValueError(f"actions must be [K>=1], got shape {actions.shape}")
    if actions.dtype.kind not in "iu":
        raise ValueError(f"actions must be integers, got {actions.dtype}")
    if actions.dtype.itemsize >= 4 and actions.dtype != _I32:
        # Wider (or unsigned 32-bit) integers must fit in int32 before the cast.
        lo, hi = int(actions.min()), int(actions.max())
        if lo < -_MAX_DIM or hi >= _MAX_DIM:
            raise ValueError(f"actions must fit in int32, got values in [{lo}, {hi}]")
    if 8 + 4 * actions.shape[0] > MAX_MESSAGE_BYTES:
        raise ValueError(f"{actions.shape[0]} actions exceed the message limit")
    prefix = _header(MessageKind.ACTIONS) + _COUNT.pack(actions.shape[0])
    return b"".join([prefix, np.ascontiguousarray(actions, dtype=_I32)])


def decode_actions(data: bytes, num_envs: int, num_actions: int | None = None) -> np.ndarray:
    """Decodes an ACTIONS message into an int32 [K] view, checking K and, when given,
    that every action is in [0, num_actions)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if num_actions is not None and not 1 <= num_actions < _MAX_DIM:
        raise ValueError(f"num_actions must be in [1, 2**31), got {num_actions}")
    buf = _buffer(data)
    n = _expect(buf, MessageKind.ACTIONS, _ACTIONS_PREFIX)
    (k,) = _COUNT.unpack_from(buf, _HEADER.size)
    _check_claim(_ACTIONS_PREFIX + 4 * k, MAX_MESSAGE_BYTES)
    if k != num_envs:
        raise WireError(f"message has {k} actions, expected {num_envs}")
    _check_length(n, _ACTIONS_PREFIX + 4 * k)
    actions = np.frombuffer(buf, _I32, k, _ACTIONS_PREFIX)
    # Viewed as uint32, negative actions become >= 2**31 > num_actions: one reduction
    # checks both ends of the range.
    if num_actions is not None and actions.view(np.uint32).max() >= num_actions:
        i = int(np.argmax((actions < 0) | (actions >= num_actions)))
        raise WireError(f"action {actions[i]} at index {i} is out of range [0, {num_actions})")
    return actions
