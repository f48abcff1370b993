"""The server's end of the gRPC inference stream: `InferenceService`.

It turns streams into `InferenceServer` calls: a stream's HELLO becomes `connect`, each
STEP_BATCH a `step` whose actions go back as one ACTIONS message, and the end of the
stream (clean, cancelled, aborted or lost) a `disconnect`, so a stream's partial unrolls
are discarded, never written, and its slots are free at once.

The stream is the trust boundary: whatever a runner sends, the worst it gets is its own
stream ended with INVALID_ARGUMENT (naming what was wrong); every other stream keeps
being served and nothing of the bad stream reaches replay (it never completes an unroll:
its partial one is dropped on disconnect).

Status codes a runner sees, and what they mean for it:
  UNAUTHENTICATED      missing or wrong `authorization: Bearer <token>` metadata.
  RESOURCE_EXHAUSTED   more streams than `max_runners`, or more environments than free
                       slots (`InferenceConfig.max_envs`).
  INVALID_ARGUMENT     a malformed message or a protocol violation.
  ABORTED              a newer stream with the same runner id took over this one.
  UNAVAILABLE          the inference server is shutting down.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import numpy as np

from seed_agents.inference import wire
from seed_agents.inference.batcher import BatcherClosedError
from seed_agents.inference.grpc_client import (
    AUTH_METADATA_KEY,
    MESSAGE_SIZE_OPTIONS,
    METHOD_NAME,
    SERVICE_NAME,
    bearer,
)
from seed_agents.inference.protocol import FIRST
from seed_agents.inference.server import InferenceServer
from seed_agents.specs import EnvironmentSpec

logger = logging.getLogger(__name__)

_STOP_CLEANUP_S = 5.0  # How long `stop` waits, after the grace, for streams' cleanup.


class _ProtocolError(Exception):
    """A stream broke the protocol; the message goes to the runner as the status details."""


@dataclasses.dataclass(eq=False)
class _Runner:
    """The streams of one runner id; the newest one owns the server-side client.

    `lock` is held around `connect` and around every `step`, so a stream that has just
    been replaced can never step the slots its successor was given (the server looks
    clients up by id only).
    """

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    owner: object | None = None
    streams: int = 0


class InferenceService:
    """Serves an `InferenceServer` to remote runners over one gRPC stream per runner.

    Each open stream holds one server thread (gRPC's sync API), so the pool has
    `max_runners` threads and at most `max_runners` streams are served; more get
    RESOURCE_EXHAUSTED at once instead of waiting for a thread. `auth_token` is a shared
    secret checked per stream; without `server_credentials` it travels in clear, so use
    both beyond a trusted network. Bind to loopback or a unix socket otherwise.
    """

    def __init__(
        self,
        server: InferenceServer,
        env_spec: EnvironmentSpec,
        address: str = "127.0.0.1:0",
        max_runners: int = 256,
        auth_token: str | None = None,
        server_credentials: grpc.ServerCredentials | None = None,
    ):
        if max_runners < 1:
            raise ValueError(f"max_runners must be >= 1, got {max_runners}.")
        self._server = server
        self._obs_shape = tuple(int(d) for d in env_spec.observations.shape)
        self._obs_dtype = np.dtype(env_spec.observations.dtype)
        self._num_actions = env_spec.num_actions
        self._requested_address = address
        self._address: str | None = None
        self._max_runners = max_runners
        self._expected_auth = bearer(auth_token).encode() if auth_token else None
        self._server_credentials = server_credentials
        self._grpc_server: grpc.Server | None = None
        self._runners: dict[str, _Runner] = {}
        self._runners_lock = threading.Lock()
        self._active = 0
        self._active_changed = threading.Condition(self._runners_lock)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> str:
        """Binds and starts serving; returns the bound address (with the real port).

        Raises OSError when the address cannot be bound (port in use, bad host, missing
        directory of a unix socket). The port is bound exclusively (no SO_REUSEPORT), so
        a second service on a busy port fails here instead of sharing its traffic.
        """
        if self._grpc_server is not None:
            raise RuntimeError("InferenceService is already started.")
        pool = futures.ThreadPoolExecutor(self._max_runners, thread_name_prefix="inference-rpc")
        server = grpc.server(
            pool,
            handlers=[
                grpc.method_handlers_generic_handler(
                    SERVICE_NAME, {METHOD_NAME: grpc.stream_stream_rpc_method_handler(self._stream)}
                )
            ],
            options=[*MESSAGE_SIZE_OPTIONS, ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=self._max_runners,
        )
        address = self._requested_address
        try:
            if self._server_credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, self._server_credentials)
        except RuntimeError as error:
            port = 0
            cause: BaseException | None = error
        else:
            cause = None
        if not port:
            pool.shutdown(wait=False)
            raise OSError(
                f"InferenceService could not bind {address!r}: the port is in use, the host "
                "does not resolve, or a unix socket's directory is missing."
            ) from cause
        server.start()
        self._grpc_server = server
        self._pool = pool
        if address.startswith("unix:") or address.startswith("unix-abstract:"):
            self._address = address
        else:
            host, _, _ = address.rpartition(":")
            self._address = f"{host}:{port}"
        logger.info("Inference service listening on %s.", self._address)
        return self._address

    @property
    def address(self) -> str:
        """The bound address once started (the real port), the requested one before."""
        return self._address or self._requested_address

    @property
    def active_streams(self) -> int:
        """Streams whose handler is running (not yet cleaned up)."""
        return self._active

    def stop(self, grace_s: float = 1.0) -> None:
        """Stops serving; open streams get `grace_s` seconds, then are cancelled.

        Returns once every stream has been cleaned up (disconnected from the server, its
        partial unrolls discarded), or after a further few seconds if a handler is stuck
        in the server. The `InferenceServer` itself stays up: a new service can serve it.
        """
        server, self._grpc_server = self._grpc_server, None
        if server is None:
            return
        server.stop(grace_s).wait()
        with self._active_changed:
            self._active_changed.wait_for(lambda: self._active == 0, _STOP_CLEANUP_S)
        self._pool.shutdown(wait=False)
        logger.info("Inference service on %s stopped.", self._address)

    def __enter__(self) -> InferenceService:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- one stream --------------------------------------------------------------------

    def _stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        if self._expected_auth is not None and not self._authorized(context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        with self._active_changed:
            self._active += 1
        try:
            yield from self._serve(requests, context)
        finally:
            with self._active_changed:
                self._active -= 1
                self._active_changed.notify_all()

    def _authorized(self, context: grpc.ServicerContext) -> bool:
        for key, value in context.invocation_metadata():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(got, self._expected_auth)
        return False

    def _serve(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        first = next(requests, None)
        if first is None:
            return  # Closed before saying anything: nothing to clean up.
        try:
            hello = self._read_hello(first)
        except (_ProtocolError, wire.WireError) as error:
            hello, problem = None, str(error)
        if hello is None:
            logger.warning("Rejecting a stream from %s: bad HELLO: %s", context.peer(), problem)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad HELLO: {problem}")
            return  # Not reached: `abort` raises.
        runner_id = hello.runner_id
        token = object()
        runner = self._register(runner_id)
        try:
            with runner.lock:
                runner.owner = token  # Set first: `connect` already evicts a predecessor.
                try:
                    self._server.connect(runner_id, hello.num_envs, hello.run_id)
                except ValueError as error:
                    runner.owner = None
                    capacity_error = str(error)
                else:
                    capacity_error = None
            if capacity_error is not None:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, capacity_error)
            logger.info(
                "Runner %s (run %s) connected with %d environments.",
                runner_id, hello.run_id, hello.num_envs,
            )
            yield from self._step_loop(requests, context, hello, runner, token)
        finally:
            self._unregister(runner_id, runner, token, hello.run_id)

    def _read_hello(self, message: bytes) -> wire.Hello:
        kind = wire.message_kind(message)
        if kind != wire.MessageKind.HELLO:
            raise _ProtocolError(f"the first message must be HELLO, got {kind.name}")
        hello = wire.decode_hello(message)
        if not hello.runner_id:
            raise _ProtocolError("runner_id is empty")
        if hello.observation_shape != self._obs_shape:
            raise _ProtocolError(
                f"observation shape {hello.observation_shape} does not match the spec's "
                f"{self._obs_shape}"
            )
        if hello.observation_dtype != self._obs_dtype:
            raise _ProtocolError(
                f"observation dtype {hello.observation_dtype} does not match the spec's "
                f"{self._obs_dtype}"
            )
        if hello.num_actions != self._num_actions:
            raise _ProtocolError(
                f"num_actions {hello.num_actions} does not match the spec's {self._num_actions}"
            )
        return hello

    def _step_loop(
        self,
        requests: Iterator[bytes],
        context: grpc.ServicerContext,
        hello: wire.Hello,
        runner: _Runner,
        token: object,
    ) -> Iterator[bytes]:
        first_batch = True
        for message in requests:
            # Every way this can fail is the runner's doing except a closed batcher; the
            # abort happens outside the `try` because `context.abort` raises.
            status = None
            try:
                kind = wire.message_kind(message)
                if kind == wire.MessageKind.HELLO:
                    raise _ProtocolError("a second HELLO on one stream")
                if kind != wire.MessageKind.STEP_BATCH:
                    raise _ProtocolError(f"expected STEP_BATCH, got {kind.name}")
                batch = wire.decode_step_batch(
                    message, hello.num_envs, self._obs_shape, self._obs_dtype
                )
                if first_batch and (batch.step_type != FIRST).any():
                    raise _ProtocolError(
                        "the first step batch of a stream must have every step_type FIRST "
                        f"(a new stream has no episode in progress), got {batch.step_type}"
                    )
                with runner.lock:
                    if runner.owner is not token:
                        status = (grpc.StatusCode.ABORTED,
                                  f"a newer stream of runner {hello.runner_id!r} took over")
                    else:
                        actions = self._server.step(hello.runner_id, batch)
            except (_ProtocolError, ValueError) as error:  # WireError is a ValueError.
                status = (grpc.StatusCode.INVALID_ARGUMENT, str(error))
            except BatcherClosedError:
                status = (grpc.StatusCode.UNAVAILABLE, "the inference server is shutting down")
            if status is not None:
                logger.warning("Ending the stream of runner %s: %s: %s",
                               hello.runner_id, status[0].name, status[1])
                context.abort(*status)
            first_batch = False
            yield wire.encode_actions(actions)

    # -- runner table ------------------------------------------------------------------

    def _register(self, runner_id: str) -> _Runner:
        with self._runners_lock:
            runner = self._runners.get(runner_id)
            if runner is None:
                runner = self._runners[runner_id] = _Runner()
            runner.streams += 1
            return runner

    def _unregister(self, runner_id: str, runner: _Runner, token: object, run_id: str) -> None:
        with runner.lock:
            if runner.owner is token:
                # Only the owner disconnects: a replaced stream's slots were already freed
                # by its successor's `connect`. run_id guards the same case inside the
                # server, should another service share it.
                runner.owner = None
                self._server.disconnect(runner_id, run_id)
                logger.info("Runner %s (run %s) disconnected.", runner_id, run_id)
        with self._runners_lock:
            runner.streams -= 1
            if runner.streams == 0:
                del self._runners[runner_id]
