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

    num_envs u32 | num_actions u32 | obs dtype u8 | obs ndim u8 | runner_id_len u16 |
    run_id_len u16 | action dtype u8 | action ndim u8 | obs dims u32[ndim] |
    action dims u32[action ndim] | runner_id utf-8 | run_id utf-8

  The action spec the runner expects: discrete actions are int32 of shape () with
  num_actions >= 1 (dm_env's DiscreteArray); continuous actions are float32 of shape
  (d, ...) with num_actions 0 (a float32 BoundedArray). Nothing else is valid.

STEP_BATCH (one per round trip, runner -> server):

    K u32 | dtype u8 | ndim u8 | reserved u16 (0) | dims u32[ndim] |
    reward f32[K] | discount f32[K] | step_type u8[K] | zero padding to a multiple of 8 |
    observation dtype[K, *dims]

ACTIONS (the answer, server -> runner):

    K u32 | dtype u8 | ndim u8 | reserved u16 (0) | dims u32[ndim] | action dtype[K, *dims]

  int32[K] (ndim 0) for discrete actions, float32[K, *action_shape] for continuous ones.

The fixed part of a step batch is 12 + 4 * ndim bytes, so reward and discount start
4-aligned and the padding puts the observation on an 8-byte boundary: `np.frombuffer`
views over a received `bytes` object are then aligned for every supported dtype, which
keeps the server's copy into its batch on numpy's fast path. ACTIONS' fixed part is a
multiple of 4 bytes too, so its int32/float32 view is aligned.

Version history: 1 had no action spec in HELLO and int32[K] ACTIONS only; 2 (this one)
carries continuous actions. A peer speaking another version is refused at its first
message, with both versions named.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from seed_agents.inference.protocol import StepBatch

__all__ = [
    "MAGIC",
    "MAX_HELLO_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_NDIM",
    "MAX_STRING_BYTES",
    "PROTOCOL_VERSION",
    "Hello",
    "MessageKind",
    "WireError",
    "action_spec_of",
    "decode_actions",
    "decode_hello",
    "decode_step_batch",
    "encode_actions",
    "encode_hello",
    "encode_step_batch",
    "hello_from_specs",
    "message_kind",
    "step_batch_bytes",
]

MAGIC = b"SA"
PROTOCOL_VERSION = 2
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
_HELLO_FIXED = struct.Struct("<IIBBHHBB")
# K u32 | dtype u8 | ndim u8 | reserved u16: the fixed part of STEP_BATCH and ACTIONS.
_BATCH_FIXED = struct.Struct("<IBBH")
_DIMS = [struct.Struct(f"<{n}I") for n in range(MAX_NDIM + 1)]
_HELLO_PREFIX = _HEADER.size + _HELLO_FIXED.size
_BATCH_PREFIX = _HEADER.size + _BATCH_FIXED.size
MAX_HELLO_BYTES = _HELLO_PREFIX + 2 * 4 * MAX_NDIM + 2 * MAX_STRING_BYTES
_PADDING = bytes(8)
_F32 = np.dtype("<f4")
_I32 = np.dtype("<i4")
_U8 = np.dtype("u1")
_BOOL_CODE = _CODES[np.dtype("?")]
_I32_CODE = _CODES[_I32]
_F32_MAX = float(np.finfo(np.float32).max)
_F32_CODE = _CODES[_F32]
_STEP_TYPES = bytes([0, 1, 2])  # dm_env FIRST, MID, LAST.


@dataclasses.dataclass(frozen=True)
class Hello:
    """What a runner announces when its stream opens: who it is, what it will send and
    what actions it expects back.

    Discrete actions: `num_actions` >= 1, `action_shape` (), `action_dtype` int32 (the
    defaults). Continuous actions: `num_actions` 0, `action_shape` (d,), `action_dtype`
    float32. `hello_from_specs` fills these from an environment's dm_env specs.
    """

    runner_id: str
    run_id: str
    num_envs: int
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int
    action_shape: tuple[int, ...] = ()
    action_dtype: np.dtype = _I32

    def __post_init__(self) -> None:
        # Normalised so that equality holds whatever the caller passed (a list, np.float32).
        object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        object.__setattr__(self, "observation_dtype", np.dtype(self.observation_dtype))
        object.__setattr__(self, "action_shape", tuple(int(d) for d in self.action_shape))
        object.__setattr__(self, "action_dtype", np.dtype(self.action_dtype))


def action_spec_of(spec: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    """(wire action dtype, action shape, num_actions) for a dm_env action spec.

    A `specs.DiscreteArray` travels as int32 of shape () with its `num_values`; a
    floating-point array (a `specs.BoundedArray` of shape (d,)) as float32 of its shape
    with num_actions 0. Raises ValueError for any other spec: the wire carries no other.
    """
    num_values = getattr(spec, "num_values", None)
    dtype = np.dtype(spec.dtype)
    if num_values is not None and dtype.kind in "iu" and tuple(spec.shape) == ():
        return np.dtype(np.int32), (), int(num_values)
    if num_values is None and dtype.kind == "f":
        return np.dtype(np.float32), tuple(int(d) for d in spec.shape), 0
    raise ValueError(
        f"action spec {spec!r} is neither discrete (a DiscreteArray of shape ()) nor "
        "continuous (a floating-point array)"
    )


def hello_from_specs(
    runner_id: str, run_id: str, num_envs: int, observation_spec: Any, action_spec: Any
) -> Hello:
    """The HELLO of a runner whose environments have these dm_env specs."""
    action_dtype, action_shape, num_actions = action_spec_of(action_spec)
    return Hello(runner_id, run_id, num_envs, observation_spec.shape, observation_spec.dtype,
                 num_actions, action_shape, action_dtype)


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
            f"protocol version {version} is not supported: this end speaks {PROTOCOL_VERSION}"
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


def _read_dims(
    buf: bytes | bytearray | memoryview, ndim: int, offset: int, what: str = "observation"
) -> tuple[int, ...]:
    dims = _DIMS[ndim].unpack_from(buf, offset)
    for i, d in enumerate(dims):
        if d >= _MAX_DIM:
            raise WireError(f"{what} dimension {i} is {d}, must be < 2**31")
    return dims


def _read_array_header(
    buf: bytes | bytearray | memoryview, kind: MessageKind, what: str
) -> tuple[int, int, int, np.dtype, tuple[int, ...], int]:
    """The part STEP_BATCH and ACTIONS share, checked: K, a dtype code and the dims.

    Returns (message length, K, dtype code, dtype, dims, where the dims end).
    """
    n = _expect(buf, kind, _BATCH_PREFIX)
    k, code, ndim, reserved = _BATCH_FIXED.unpack_from(buf, _HEADER.size)
    if reserved:
        raise WireError(f"reserved header field is {reserved}, must be 0")
    if ndim > MAX_NDIM:
        raise WireError(f"{what} ndim {ndim} exceeds the maximum of {MAX_NDIM}")
    dims_end = _BATCH_PREFIX + 4 * ndim
    if n < dims_end:
        raise WireError(f"message truncated: {n} bytes, expected at least {dims_end}")
    dims = _read_dims(buf, ndim, _BATCH_PREFIX, what)
    dtype = _DTYPES.get(code)
    if dtype is None:
        raise WireError(f"unknown {what} dtype code {code}")
    return n, k, code, dtype, dims, dims_end


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite (NaN and +-inf are not)."""
    return bool(np.isfinite(values).all())


def _action_problem(dtype: np.dtype, shape: tuple[int, ...], num_actions: int) -> str | None:
    """What is wrong with an action spec, or None: shared by encoder and decoder."""
    if dtype == _I32:
        if shape:
            return f"discrete (int32) actions must have shape (), got {shape}"
        if not 1 <= num_actions < _MAX_DIM:
            return f"discrete actions need num_actions in [1, 2**31), got {num_actions}"
    elif dtype == _F32:
        if num_actions != 0:
            return f"continuous (float32) actions must have num_actions 0, got {num_actions}"
        if any(d < 1 for d in shape):
            return f"continuous action shape {shape} has an empty dimension"
    else:
        return (f"action dtype {dtype.name} is not supported: int32 (discrete) or float32 "
                "(continuous)")
    return None


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
    action_shape = _check_shape(hello.action_shape, "action_shape")
    if not 1 <= hello.num_envs < _MAX_DIM:
        raise ValueError(f"num_envs must be in [1, 2**31), got {hello.num_envs}")
    action_dtype = hello.action_dtype.newbyteorder("<")
    if (problem := _action_problem(action_dtype, action_shape, hello.num_actions)) is not None:
        raise ValueError(problem)
    runner_id = _utf8(hello.runner_id, "runner_id")
    run_id = _utf8(hello.run_id, "run_id")
    fixed = _HELLO_FIXED.pack(
        hello.num_envs, hello.num_actions, wire[0], len(shape), len(runner_id), len(run_id),
        _CODES[action_dtype], len(action_shape),
    )
    return b"".join([
        _header(MessageKind.HELLO), fixed, _DIMS[len(shape)].pack(*shape),
        _DIMS[len(action_shape)].pack(*action_shape), runner_id, run_id,
    ])


def _decode_utf8(raw: bytes | bytearray | memoryview, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"{what} is not valid UTF-8: {e.reason} at byte {e.start}") from None


def decode_hello(data: bytes) -> Hello:
    """Decodes and validates a HELLO message (the action spec included)."""
    buf = _buffer(data)
    n = _expect(buf, MessageKind.HELLO, _HELLO_PREFIX)
    (num_envs, num_actions, code, ndim, runner_len, run_len, action_code,
     action_ndim) = _HELLO_FIXED.unpack_from(buf, _HEADER.size)
    if ndim > MAX_NDIM:
        raise WireError(f"observation ndim {ndim} exceeds the maximum of {MAX_NDIM}")
    if action_ndim > MAX_NDIM:
        raise WireError(f"action ndim {action_ndim} exceeds the maximum of {MAX_NDIM}")
    if code not in _DTYPES:
        raise WireError(f"unknown observation dtype code {code}")
    if action_code not in _DTYPES:
        raise WireError(f"unknown action dtype code {action_code}")
    if not 1 <= num_envs < _MAX_DIM:
        raise WireError(f"num_envs must be in [1, 2**31), got {num_envs}")
    for what, length in (("runner_id", runner_len), ("run_id", run_len)):
        if length > MAX_STRING_BYTES:
            raise WireError(f"{what} is {length} bytes, more than the maximum {MAX_STRING_BYTES}")
    action_dims_at = _HELLO_PREFIX + 4 * ndim
    strings_at = action_dims_at + 4 * action_ndim
    _check_length(n, strings_at + runner_len + run_len)
    dims = _read_dims(buf, ndim, _HELLO_PREFIX)
    action_dims = _read_dims(buf, action_ndim, action_dims_at, "action")
    action_dtype = _DTYPES[action_code]
    if (problem := _action_problem(action_dtype, action_dims, num_actions)) is not None:
        raise WireError(problem)
    return Hello(
        runner_id=_decode_utf8(buf[strings_at : strings_at + runner_len], "runner_id"),
        run_id=_decode_utf8(buf[strings_at + runner_len : n], "run_id"),
        num_envs=num_envs,
        observation_shape=dims,
        observation_dtype=_DTYPES[code].newbyteorder("="),
        num_actions=num_actions,
        action_shape=action_dims,
        action_dtype=action_dtype.newbyteorder("="),
    )


# -- STEP_BATCH --------------------------------------------------------------------------


def _batch_offsets(num_envs: int, ndim: int) -> tuple[int, int]:
    """(start of reward, start of observation) for a step batch."""
    scalars_at = _BATCH_PREFIX + 4 * ndim
    end = scalars_at + 9 * num_envs  # reward f32, discount f32, step_type u8.
    return scalars_at, (end + 7) & ~7


def step_batch_bytes(num_envs: int, observation_shape: Sequence[int],
                     observation_dtype: DTypeLike) -> int:
    """The exact size of a STEP_BATCH of `num_envs` observations of this shape and dtype:
    what a receiver may need to buffer for one message of a runner that said so."""
    shape = tuple(int(d) for d in observation_shape)
    _, obs_at = _batch_offsets(num_envs, len(shape))
    return obs_at + num_envs * math.prod(shape) * np.dtype(observation_dtype).itemsize


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
    layout = _batch_layout(num_envs, tuple(observation_shape), np.dtype(observation_dtype))
    buf = _buffer(data)
    # The usual case costs one comparison: every header field (magic, version, kind, K,
    # dtype, shape) is what the receiver expects, byte for byte, and so is the length.
    # Anything else takes the slow path, which names the first field that is wrong.
    header, k, dims, code, dtype, scalars_at, padding_at, obs_at, total = layout
    if len(buf) != total or buf[: len(header)] != header or total > max_message_bytes:
        _raise_header_error(buf, num_envs, observation_shape, observation_dtype,
                            max_message_bytes)
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
    observation = np.frombuffer(buf, dtype, k * math.prod(dims), obs_at).reshape(k, *dims)
    if code == _BOOL_CODE and observation.view(_U8).max(initial=0) > 1:
        # Any byte other than 0/1 in a numpy bool array gives inconsistent results.
        raise WireError("bool observation holds a byte other than 0 or 1")
    if dtype.kind == "f" and not _all_finite(observation):
        rows = observation.reshape(k, -1)  # Not empty: an empty array sums to 0.
        i = int(np.argmin(np.isfinite(rows).all(axis=1)))
        bad = rows[i][~np.isfinite(rows[i])][0]
        raise WireError(f"observation[{i}] holds {bad}: float observations must be finite")
    return StepBatch(
        observation=observation,
        reward=scalars[:k],
        discount=scalars[k:],
        step_type=np.frombuffer(buf, _U8, k, st_at),
    )


class _BatchLayout(NamedTuple):
    header: bytes  # Every byte before reward, as a valid batch has them.
    num_envs: int
    shape: tuple[int, ...]
    code: int
    dtype: np.dtype
    scalars_at: int
    padding_at: int
    obs_at: int
    total: int


@functools.lru_cache(maxsize=256)
def _batch_layout(num_envs: int, shape: tuple[int, ...], dtype: np.dtype) -> _BatchLayout:
    """What a valid STEP_BATCH with these expectations looks like."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    wire = _wire_dtype(dtype)
    if wire is None:
        raise ValueError(f"observation dtype {dtype} is not supported")
    shape = _check_shape(shape, "observation shape")
    header = (_header(MessageKind.STEP_BATCH) + _BATCH_FIXED.pack(num_envs, wire[0], len(shape), 0)
              + _DIMS[len(shape)].pack(*shape))
    scalars_at, obs_at = _batch_offsets(num_envs, len(shape))
    total = obs_at + num_envs * math.prod(shape) * wire[1].itemsize
    return _BatchLayout(header, num_envs, shape, wire[0], wire[1], scalars_at,
                        scalars_at + 9 * num_envs, obs_at, total)


def _raise_header_error(buf, num_envs, observation_shape, observation_dtype,
                        max_message_bytes) -> None:
    """Names what makes `buf`'s header or length differ from `layout`; always raises."""
    expected = _wire_dtype(observation_dtype)
    expected_shape = tuple(int(d) for d in observation_shape)
    n, k, code, dtype, dims, _ = _read_array_header(buf, MessageKind.STEP_BATCH, "observation")
    _, obs_at = _batch_offsets(k, len(dims))
    total = obs_at + k * math.prod(dims) * dtype.itemsize
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
    raise WireError("malformed step batch header")  # Not reached: a field differed.


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
    """Encodes one action per environment: integers as int32 [K] (discrete), floats as
    float32 [K, *action_shape] (continuous, all finite); raises ValueError otherwise."""
    actions = np.asarray(actions)
    if actions.dtype == _I32 and actions.ndim == 1 and actions.shape[0]:
        # The usual discrete answer, already int32 [K]: nothing to check or convert.
        return b"".join([_actions_prefix(actions.shape[0], _I32_CODE, ()), actions])
    if actions.ndim < 1 or actions.shape[0] < 1:
        raise ValueError(f"actions must be [K>=1, ...], got shape {actions.shape}")
    k = actions.shape[0]
    if actions.dtype.kind in "iu":
        if actions.ndim != 1:
            raise ValueError(f"discrete actions must be [K], got shape {actions.shape}")
        if actions.dtype.itemsize >= 4 and actions.dtype != _I32:
            # Wider (or unsigned 32-bit) integers must fit in int32 before the cast.
            lo, hi = int(actions.min()), int(actions.max())
            if lo < -_MAX_DIM or hi >= _MAX_DIM:
                raise ValueError(f"actions must fit in int32, got values in [{lo}, {hi}]")
        code, dtype = _I32_CODE, _I32
    elif actions.dtype.kind == "f":
        code, dtype = _F32_CODE, _F32
    else:
        raise ValueError(f"actions must be integers or floats, got {actions.dtype}")
    shape = _check_shape(actions.shape[1:], "action shape")
    if code == _F32_CODE and not (
        _all_finite(actions) if actions.dtype.itemsize <= 4
        else (np.abs(actions) <= _F32_MAX).all()  # NaN fails too; 1e39 would cast to inf.
    ):
        raise ValueError("continuous actions must be finite float32 values")
    data = np.ascontiguousarray(actions, dtype=dtype)
    if _BATCH_PREFIX + 4 * len(shape) + data.nbytes > MAX_MESSAGE_BYTES:
        raise ValueError(f"{k} actions of shape {shape} exceed the message limit")
    return b"".join([_actions_prefix(k, code, shape), data])


@functools.lru_cache(maxsize=256)
def _actions_prefix(k: int, code: int, shape: tuple[int, ...]) -> bytes:
    """Everything before the values of an ACTIONS message."""
    return (_header(MessageKind.ACTIONS) + _BATCH_FIXED.pack(k, code, len(shape), 0)
            + _DIMS[len(shape)].pack(*shape))


def decode_actions(
    data: bytes,
    num_envs: int,
    num_actions: int | None = None,
    action_shape: Sequence[int] = (),
    action_dtype: DTypeLike = np.int32,
) -> np.ndarray:
    """Decodes an ACTIONS message into a read-only view: int32 [K] for discrete actions
    (the default), float32 [K, *action_shape] for continuous ones.

    Checks K, dtype and shape against the expectations (the runner's HELLO), that every
    discrete action is in [0, num_actions) when `num_actions` is given, and that every
    continuous action is finite. Bad expectations are the caller's bug (ValueError).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    expected_dtype = np.dtype(action_dtype).newbyteorder("<")
    if expected_dtype not in (_I32, _F32):
        raise ValueError(f"action dtype {expected_dtype.name} is not supported")
    if expected_dtype == _I32 and num_actions is not None and not 1 <= num_actions < _MAX_DIM:
        raise ValueError(f"num_actions must be in [1, 2**31), got {num_actions}")
    expected_shape = tuple(int(d) for d in action_shape)
    buf = _buffer(data)
    n, k, code, dtype, dims, values_at = _read_array_header(buf, MessageKind.ACTIONS, "action")
    size = k * math.prod(dims)
    total = values_at + size * dtype.itemsize
    _check_claim(total, MAX_MESSAGE_BYTES)
    if k != num_envs:
        raise WireError(f"message has {k} actions, expected {num_envs}")
    if dtype != expected_dtype:
        raise WireError(f"action dtype {dtype.name} does not match the expected "
                        f"{expected_dtype.name}")
    if dims != expected_shape:
        raise WireError(f"action shape {dims} does not match the expected {expected_shape}")
    _check_length(n, total)
    actions = np.frombuffer(buf, dtype, size, values_at)
    if code == _I32_CODE:
        # Viewed as uint32, negative actions become >= 2**31 > num_actions: one reduction
        # checks both ends of the range.
        if num_actions is not None and actions.view(np.uint32).max() >= num_actions:
            i = int(np.argmax((actions < 0) | (actions >= num_actions)))
            raise WireError(
                f"action {actions[i]} at index {i} is out of range [0, {num_actions})")
        return actions
    actions = actions.reshape(k, *dims)
    if not _all_finite(actions):
        i = int(np.argmin(np.isfinite(actions.reshape(k, -1)).all(axis=1)))
        raise WireError(f"action {i} is {actions[i].tolist()}: continuous actions must be "
                        "finite")
    return actions
