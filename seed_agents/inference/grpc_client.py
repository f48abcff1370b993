"""The runner's end of the gRPC inference stream: `RemoteInference`, an `infer` callable.

One bidirectional stream per runner carries raw `wire` bytes: a HELLO first, then one
STEP_BATCH per round trip, each answered by one ACTIONS message. There is no protobuf
codegen; `wire` is the schema. This module imports grpc, numpy, `wire` and `protocol`
only, so runner processes never load TensorFlow or Reverb.

The names shared with the server (method path, metadata key, channel options) live here
because this is the side that must stay small; the server imports them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import numpy as np

from seed_agents.inference import wire
from seed_agents.inference.protocol import StepBatch

SERVICE_NAME = "seed_agents.Inference"
METHOD_NAME = "Stream"
STREAM_METHOD = f"/{SERVICE_NAME}/{METHOD_NAME}"
AUTH_METADATA_KEY = "authorization"

# gRPC's default 4 MiB receive limit is below what `wire` allows for one step batch.
MESSAGE_SIZE_OPTIONS = [
    ("grpc.max_send_message_length", wire.MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", wire.MAX_MESSAGE_BYTES),
]

_END = object()  # Request queue: half-close the stream. Response queue: the stream ended.
_CLOSE_WAIT_S = 2.0


def bearer(token: str) -> str:
    """The `authorization` metadata value for `token`."""
    return f"Bearer {token}"


class StreamError(grpc.RpcError):
    """A stream failure noticed on this side (no reply in time, an early end of stream).

    Shaped like the errors gRPC raises (`code()`, `details()`), so a caller handles every
    stream failure in one place.
    """

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class RemoteInference:
    """Asks a remote `InferenceService` for actions; usable as `EnvRunner.run`'s `infer`.

    The stream opens in the constructor with the HELLO queued, but nothing is read until
    the first call: a rejection of the HELLO (wrong spec, bad token, no capacity) is
    raised by the first `__call__` as a `grpc.RpcError`. After any error the stream is
    dead and every later call raises the same error; open a new `RemoteInference` (the
    server then expects an all-FIRST first batch again).

    One caller at a time, one batch in flight: a call (or `send` then `receive`, the
    `InferenceChannel` of a runner's group) sends one batch and waits for its actions at
    most `timeout_s` (then the stream is cancelled and `StreamError(DEADLINE_EXCEEDED)` is
    raised). The returned actions are a read-only view, valid until the next call: int32
    [K] for discrete actions, float32 [K, *action_shape] for continuous ones, as the
    HELLO announced. `close()` from another thread cancels a call in flight.
    `channel_options` are extra gRPC channel options (e.g. `TLSConfig.channel_options`).
    """

    def __init__(
        self,
        address: str,
        hello: wire.Hello,
        auth_token: str | None = None,
        channel_credentials: grpc.ChannelCredentials | None = None,
        timeout_s: float = 60.0,
        channel_options: Sequence[tuple[str, Any]] = (),
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
        self.address = address
        self.hello = hello
        self.timeout_s = timeout_s
        hello_bytes = wire.encode_hello(hello)  # Raises here, not in gRPC's sender thread.
        options = [*MESSAGE_SIZE_OPTIONS, *channel_options]
        if channel_credentials is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            self._channel = grpc.secure_channel(address, channel_credentials, options=options)
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._responses: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put(hello_bytes)
        self._error: BaseException | None = None
        self._closed = False
        self._in_flight = False
        metadata = [(AUTH_METADATA_KEY, bearer(auth_token))] if auth_token else None
        stream = self._channel.stream_stream(STREAM_METHOD)  # No serializers: bytes.
        self._call = stream(self._request_iterator(), metadata=metadata)
        # gRPC's iterator has no timeout, so a reader thread drains it and `__call__`
        # waits on a queue with one. It costs a thread hand-off per step; a hung server
        # costs `timeout_s` instead of a runner stuck forever.
        self._reader = threading.Thread(
            target=self._read, name=f"remote-inference-{hello.runner_id}", daemon=True
        )
        self._reader.start()

    def _request_iterator(self) -> Iterator[bytes]:
        while (message := self._requests.get()) is not _END:
            yield message

    def _read(self) -> None:
        try:
            for message in self._call:
                self._responses.put(message)
            self._responses.put(_END)
        except grpc.RpcError as error:
            self._responses.put(error)

    def __call__(self, batch: StepBatch) -> np.ndarray:
        """Sends `batch` and blocks until its actions arrive (`send`, then `receive`)."""
        self.send(batch)
        return self.receive()

    def send(self, batch: StepBatch) -> None:
        """Queues `batch` (encoded now: the arrays may be reused at once); its actions are
        `receive`'s. One batch in flight at a time."""
        self._check_open()
        k = self.hello.num_envs
        if batch.observation.shape[:1] != (k,):
            raise ValueError(
                f"batch has observation shape {batch.observation.shape}, but this stream "
                f"announced {k} environments."
            )
        if self._in_flight:
            raise RuntimeError("send() while a batch is in flight: receive() its actions first.")
        self._requests.put(wire.encode_step_batch(batch))
        self._in_flight = True

    def receive(self) -> np.ndarray:
        """Blocks until the actions for the batch in flight arrive, at most `timeout_s`."""
        self._check_open()
        if not self._in_flight:
            raise RuntimeError("receive() without a batch in flight: send() one first.")
        self._in_flight = False
        try:
            reply = self._responses.get(timeout=self.timeout_s)
        except queue.Empty:
            reply = StreamError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no reply from {self.address} within {self.timeout_s} s",
            )
            self._call.cancel()
        if reply is _END:
            reply = StreamError(
                grpc.StatusCode.UNAVAILABLE,
                f"the server at {self.address} ended the stream without an answer",
            )
        if isinstance(reply, BaseException):
            self._error = reply
            raise reply
        hello = self.hello
        return wire.decode_actions(reply, hello.num_envs, hello.num_actions or None,
                                   hello.action_shape, hello.action_dtype)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("RemoteInference is closed.")
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Ends the stream and the channel; the server then discards partial unrolls.

        Half-closes first so the server sees a clean end, waits briefly for its status,
        then cancels whatever is left. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._requests.put(_END)
        self._reader.join(_CLOSE_WAIT_S)
        self._call.cancel()
        self._reader.join(_CLOSE_WAIT_S)
        self._channel.close()

    def __enter__(self) -> RemoteInference:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
