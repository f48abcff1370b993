"""The server's end of the gRPC inference stream: `InferenceService`.

It turns streams into `InferenceServer` calls: a stream's HELLO becomes `connect`, each
STEP_BATCH a `submit` whose actions go back as one ACTIONS message, and the end of the
stream (clean, cancelled, aborted, timed out or lost) a `disconnect`, so a stream's
partial unrolls are discarded, never written, and its slots are free at once.

One asyncio event loop (uvloop's where installed: `new_event_loop`), on a thread of its
own, serves every stream (gRPC's asyncio server): a stream costs a coroutine and a few
objects, not a thread, so a thousand runners do not fight over the interpreter lock in a
thousand threads, and a stream is admitted as soon as the loop reads its first message.
The policy runs on the server's batcher thread; its answers come back to the loop in one
wake-up per batch.

The stream is the trust boundary. Whatever a peer sends, the worst it gets is its own
stream ended with a status naming what was wrong; every other stream keeps being served
and nothing of the bad stream reaches replay (it never completes an unroll: its partial
one is dropped on disconnect). What any one peer can hold is bounded:
  * a place: at most `max_streams` streams at once; one more is refused at once;
  * time: a stream must say HELLO within `hello_timeout_s` and send its next batch within
    `idle_timeout_s` of its last answer (and read that answer), or it is ended;
  * memory: gRPC refuses any message larger than the largest valid one (a step batch of
    `max_envs_per_stream` environments), and each stream's batches must have exactly the
    size its HELLO implies; a stream holds at most one message at a time, so the service
    buffers at most `max_streams * max_message_bytes` plus HTTP/2 flow-control windows;
  * batching: a runner that goes silent holds other runners' batches back for at most
    `InferenceConfig.active_window_ms` (see `DynamicBatcher`);
  * logs: rejections are summarised per peer (`RejectionLog`).

Status codes a runner sees, and what they mean for it:
  UNAUTHENTICATED      missing or wrong `authorization: Bearer <token>` metadata.
  RESOURCE_EXHAUSTED   more streams than `max_streams`, more environments than free
                       slots (`InferenceConfig.max_envs`) or than `max_envs_per_stream`,
                       or a message larger than the largest valid one.
  INVALID_ARGUMENT     a malformed message or a protocol violation (another protocol
                       version, an action spec that is not the environment's, a step
                       type out of order, a non-finite value, ...).
  DEADLINE_EXCEEDED    no HELLO, or no next batch, in time.
  ABORTED              a newer stream with the same runner id took over this one.
  UNAVAILABLE          the inference server is shutting down.
  INTERNAL             the policy failed on a batch holding this stream's request.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import logging
import math
import socket
import threading
from typing import Any

import grpc
import numpy as np

from seed_agents.inference import wire
from seed_agents.inference.batcher import BatcherClosedError
from seed_agents.inference.grpc_client import (
    AUTH_METADATA_KEY,
    METHOD_NAME,
    SERVICE_NAME,
    bearer,
)
from seed_agents.inference.rejections import RejectionLog
from seed_agents.inference.server import InferenceServer
from seed_agents.inference.step_types import StepTypeTracker
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.event_loops import new_event_loop
from seed_agents.utils.startup import START_TIMEOUT_S

logger = logging.getLogger(__name__)

# How long `stop` waits, after the grace, for gRPC's shutdown and then for streams' cleanup.
_STOP_CLEANUP_S = 5.0
_Status = tuple[grpc.StatusCode, str]


class _Reject(Exception):
    """Ends a stream with `status`; raised inside the handler, turned into an abort."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.status: _Status = (code, details)


class _LoopRelay:
    """Hands answers from the batcher thread to the event loop, one wake-up per batch.

    `call_soon_threadsafe` writes to the loop's self-pipe on every call; a batch of 256
    requests would cost 256 writes and wake-ups. Answers queue up instead, and only the
    first of a burst schedules a drain.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._done: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def deliver(self, future: asyncio.Future, result: Any, error: BaseException | None) -> None:
        """Any thread: resolves `future` on the loop soon."""
        self._done.append((future, result, error))
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # The loop is closed: nobody waits for the answer any more.
            pass

    def _drain(self) -> None:
        with self._lock:
            self._scheduled = False  # Before popping: a later answer schedules a new drain.
        done = self._done
        while done:
            future, result, error = done.popleft()
            if future.done():  # Its stream was cancelled meanwhile.
                continue
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)


class _Stream:
    """One stream's state, owned by the event loop."""

    __slots__ = ("task", "deadline", "deadline_status", "ended", "future", "callback",
                 "relay")

    def __init__(self, task: asyncio.Task, deadline: float, relay: _LoopRelay):
        self.task = task
        self.deadline = deadline
        self.deadline_status: _Status | None = None
        self.ended: _Status | None = None  # Why another party cancelled the task.
        self.future: asyncio.Future | None = None
        self.relay = relay
        self.callback = self.on_answer  # Bound once: one `submit` per round trip.

    def on_answer(self, result: Any, error: BaseException | None) -> None:
        self.relay.deliver(self.future, result, error)

    def end(self, status: _Status) -> None:
        """Ends the stream from outside its handler (a timeout, a takeover)."""
        if self.ended is None:
            self.ended = status
            self.task.cancel()


class InferenceService:
    """Serves an `InferenceServer` to remote runners over one gRPC stream per runner.

    Args:
      server: the inference server the streams feed.
      env_spec: the environment spec it serves; each HELLO must match its observation
        and action specs.
      address: "host:port" ("127.0.0.1:0" picks a free port) or "unix:/path".
      max_streams: streams served at once; one more is refused at once.
      auth_token: a shared secret each stream must present (None: no check, for tests
        and loopback tools; every launcher sets one). Without `server_credentials` it
        travels in clear: use both beyond a trusted network.
      server_credentials: TLS credentials (see `security.TLSConfig`), or None.
      max_envs_per_stream: the most environments one stream may announce (default: the
        server's `max_envs`); it sets the largest message the service accepts.
      hello_timeout_s: how long a new stream may take to say HELLO.
      idle_timeout_s: how long a stream may take, after an answer, to read it and send
        its next batch.
      max_runners: the former name of `max_streams`.
      accept_loops: gRPC servers sharing the port (SO_REUSEPORT, one event loop). gRPC's
        asyncio server takes new streams one at a time, a few loop turns each; when a
        thousand streams are busy, a turn is long, so one server admitted about 30
        streams a second here. The kernel spreads new connections over the servers, each
        accepting in parallel (8 admitted 1,024 streams about 5x sooner). At 2,048 busy
        streams 8 took 27.6-27.8 s to answer every stream once, 16 took 15.3-17.3 s and 32
        10.7-11.1 s, but 32 served 15-20% fewer observations per second once all were in
        (runner_scale.py, 2 cores): 16 is the default. TCP only: a unix socket gets one
        server.
      rejection_log_interval_s: a peer's rejected streams are logged once, then summed
        up at most once per this interval (see `RejectionLog`).
    """

    def __init__(
        self,
        server: InferenceServer,
        env_spec: EnvironmentSpec,
        address: str = "127.0.0.1:0",
        max_streams: int = 1024,
        auth_token: str | None = None,
        server_credentials: grpc.ServerCredentials | None = None,
        max_envs_per_stream: int | None = None,
        hello_timeout_s: float = 10.0,
        idle_timeout_s: float = 300.0,
        max_runners: int | None = None,
        accept_loops: int = 16,
        rejection_log_interval_s: float = 10.0,
    ):
        if max_runners is not None:
            max_streams = max_runners
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}.")
        if accept_loops < 1:
            raise ValueError(f"accept_loops must be >= 1, got {accept_loops}.")
        if hello_timeout_s <= 0 or idle_timeout_s <= 0:
            raise ValueError("hello_timeout_s and idle_timeout_s must be > 0, got "
                             f"{hello_timeout_s} and {idle_timeout_s}.")
        self._server = server
        # What runners send: the spec's observation, or one frame of it where the server
        # stacks frames (`InferenceConfig.frame_stack`).
        self._obs_shape = tuple(int(d) for d in server.client_observation_shape)
        self._stacked_shape = tuple(int(d) for d in env_spec.observations.shape)
        self._obs_dtype = np.dtype(env_spec.observations.dtype)
        # Never `env_spec.num_actions`: it raises for continuous action specs.
        self._action_dtype, self._action_shape, self._num_actions = wire.action_spec_of(
            env_spec.actions)
        self._max_envs_per_stream = max_envs_per_stream or server.max_envs
        if self._max_envs_per_stream < 1:
            raise ValueError(f"max_envs_per_stream must be >= 1, got {max_envs_per_stream}.")
        self.max_message_bytes = max(
            wire.MAX_HELLO_BYTES,
            wire.step_batch_bytes(self._max_envs_per_stream, self._obs_shape, self._obs_dtype))
        if self.max_message_bytes > wire.MAX_MESSAGE_BYTES:
            raise ValueError(
                f"a step batch of {self._max_envs_per_stream} environments needs "
                f"{self.max_message_bytes} bytes, more than the wire's limit "
                f"{wire.MAX_MESSAGE_BYTES}: lower max_envs_per_stream.")
        self._requested_address = address
        self._address: str | None = None
        self._max_streams = max_streams
        self._expected_auth = bearer(auth_token).encode() if auth_token else None
        self._server_credentials = server_credentials
        self._hello_timeout_s = hello_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._accept_loops = accept_loops
        self._rejections = RejectionLog(logger, rejection_log_interval_s)
        # Owned by the event loop from `start` on:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._grpc_servers: list[grpc.aio.Server] = []
        self._relay: _LoopRelay | None = None
        self._streams: set[_Stream] = set()
        self._owners: dict[str, _Stream] = {}  # runner id -> the stream that owns it
        self._idle: asyncio.Event | None = None
        self._sweeper: asyncio.Task | None = None
        self.streams_admitted = 0
        # Payload bytes of every message read and written (gRPC adds a 5-byte prefix to
        # each, HTTP/2 and TCP their headers): what a deployment's network carries per
        # step. Written by the event loop only; ints, read by anyone.
        self.bytes_received = 0
        self.bytes_sent = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> str:
        """Binds and starts serving; returns the bound address (with the real port).

        Raises OSError when the address cannot be bound (port in use, bad host, missing
        directory of a unix socket). The port is bound exclusively (no SO_REUSEPORT), so
        a second service on a busy port fails here instead of sharing its traffic.
        """
        if self._thread is not None:
            raise RuntimeError("InferenceService is already started.")
        loop = new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, args=(loop,),
                                        name="inference-service", daemon=True)
        self._thread.start()
        try:
            self._address = asyncio.run_coroutine_threadsafe(self._start(), loop).result(
                START_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(START_TIMEOUT_S)
            self._thread = None
            raise TimeoutError(f"The inference service's gRPC server did not start "
                               f"within {START_TIMEOUT_S:.0f} s.") from None
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(START_TIMEOUT_S)
            self._thread = None
            raise
        self._loop = loop
        logger.info("Inference service listening on %s.", self._address)
        return self._address

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                _finish_tasks(loop)
            finally:
                loop.close()

    async def _start(self) -> str:
        loop = asyncio.get_running_loop()
        self._relay = _LoopRelay(loop)
        self._idle = asyncio.Event()
        self._idle.set()
        address = self._requested_address
        unix = address.startswith("unix:") or address.startswith("unix-abstract:")
        host, _, port_text = address.rpartition(":")
        loops = 1 if unix else self._accept_loops
        if loops > 1 and port_text not in ("", "0"):
            _check_port_free(address, host, port_text)
        port = None
        try:
            for i in range(loops):
                bind = address if i == 0 or unix else f"{host}:{port}"
                server, port = self._bind(bind, reuse_port=loops > 1)
                self._grpc_servers.append(server)
                await server.start()
        except BaseException:
            await asyncio.gather(*(s.stop(None) for s in self._grpc_servers))
            self._grpc_servers.clear()
            raise
        tick = min(max(min(self._hello_timeout_s, self._idle_timeout_s) / 4, 0.05), 1.0)
        self._sweeper = loop.create_task(self._sweep(tick))
        return address if unix else f"{host}:{port}"

    def _bind(self, address: str, reuse_port: bool) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(
            handlers=[grpc.method_handlers_generic_handler(
                SERVICE_NAME, {METHOD_NAME: grpc.stream_stream_rpc_method_handler(self._stream)})],
            options=[
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", wire.MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", int(reuse_port)),
            ],
        )
        try:
            if self._server_credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, self._server_credentials)
        except RuntimeError as error:
            port, cause = 0, error
        else:
            cause = None
        if not port:
            raise OSError(
                f"InferenceService could not bind {address!r}: the port is in use, the host "
                "does not resolve, or a unix socket's directory is missing."
            ) from cause
        return server, port

    @property
    def address(self) -> str:
        """The bound address once started (the real port), the requested one before."""
        return self._address or self._requested_address

    @property
    def active_streams(self) -> int:
        """Streams whose handler is running (not yet cleaned up)."""
        return len(self._streams)

    @property
    def rejected(self) -> dict[str, int]:
        """Streams refused or ended with an error so far, by status name."""
        return dict(self._rejections.rejected)

    def stop(self, grace_s: float = 1.0) -> None:
        """Stops serving; open streams get `grace_s` seconds, then are cancelled.

        Returns once every stream has been cleaned up (disconnected from the server, its
        partial unrolls discarded), or after a further few seconds if a handler or gRPC's
        own shutdown is stuck (logged): a stop never hangs and never raises for that.
        The `InferenceServer` itself stays up: a new service can serve it.
        """
        loop, self._loop = self._loop, None
        if loop is None:
            return
        shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(grace_s), loop)
        try:
            # `_shutdown` bounds its own waits; this bound is for a loop that is blocked.
            shutdown.result(grace_s + 3 * _STOP_CLEANUP_S)
        except concurrent.futures.TimeoutError:
            logger.error("The inference service's event loop did not finish its shutdown "
                         "within %.0f s; stopping it anyway.", grace_s + 3 * _STOP_CLEANUP_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(2 * _STOP_CLEANUP_S)
            self._thread = None
        logger.info("Inference service on %s stopped.", self._address)

    async def _shutdown(self, grace_s: float) -> None:
        self._sweeper.cancel()
        # gRPC's asyncio server learns that its shutdown is complete from an event its
        # poller thread hands to the loop. Should that never come (once, in CI, a stop
        # waited over 10 s for it), the stop goes on without it: a server stops
        # listening when its shutdown starts, and cancels its calls after the grace.
        stops = [asyncio.ensure_future(server.stop(grace_s)) for server in self._grpc_servers]
        _, stuck = await asyncio.wait(stops, timeout=grace_s + _STOP_CLEANUP_S)
        if stuck:
            logger.warning("%d of %d gRPC servers did not report their shutdown within "
                           "%.0f s of the stop; going on without them.", len(stuck),
                           len(stops), grace_s + _STOP_CLEANUP_S)
        self._grpc_servers.clear()
        try:
            await asyncio.wait_for(self._idle.wait(), _STOP_CLEANUP_S)
        except TimeoutError:
            logger.warning("%d streams were not cleaned up within %.0f s of the stop.",
                           len(self._streams), _STOP_CLEANUP_S)
        self._rejections.flush(force=True)

    def __enter__(self) -> InferenceService:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    async def _sweep(self, tick: float) -> None:
        """Ends streams past their deadline; writes due rejection summaries."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            for stream in list(self._streams):
                if stream.deadline < now:
                    stream.end(stream.deadline_status)
            self._rejections.flush()

    # -- one stream --------------------------------------------------------------------

    async def _stream(self, _requests: Any, context: grpc.aio.ServicerContext) -> None:
        # Refusals come first and cost nothing but a status: no place, no state.
        if self._expected_auth is not None and not self._authorized(context):
            await self._abort(context, (grpc.StatusCode.UNAUTHENTICATED,
                                        "missing or wrong bearer token"))
        if len(self._streams) >= self._max_streams:
            await self._abort(context, (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the service already serves its maximum of {self._max_streams} streams"))
        loop = asyncio.get_running_loop()
        stream = _Stream(asyncio.current_task(), loop.time() + self._hello_timeout_s,
                         self._relay)
        stream.deadline_status = (grpc.StatusCode.DEADLINE_EXCEEDED,
                                  f"no HELLO within {self._hello_timeout_s:g} s")
        self._streams.add(stream)
        self._idle.clear()
        status: _Status | None = None
        try:
            await self._serve(stream, context, loop)
        except _Reject as reject:
            status = reject.status
        except asyncio.CancelledError:
            if stream.ended is None:
                raise  # gRPC cancelled it: the peer went away or the service stops.
            status = stream.ended
        finally:
            self._streams.discard(stream)
            if not self._streams:
                self._idle.set()
        if status is not None:
            await self._abort(context, status)

    async def _abort(self, context: grpc.aio.ServicerContext, status: _Status) -> None:
        self._rejections.reject(context.peer(), status[0].name, status[1])
        await context.abort(*status)  # Raises: the handler ends here.

    def _authorized(self, context: grpc.aio.ServicerContext) -> bool:
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else value
                return hmac.compare_digest(got, self._expected_auth)
        return False

    async def _serve(self, stream: _Stream, context: grpc.aio.ServicerContext,
                     loop: asyncio.AbstractEventLoop) -> None:
        first = await context.read()
        if first is grpc.aio.EOF:
            return  # Closed before saying anything: nothing to clean up.
        self.bytes_received += len(first)
        hello = self._read_hello(first)
        self._connect(stream, hello)
        runner_id = hello.runner_id
        self.streams_admitted += 1
        logger.info("Runner %s (run %s) connected with %d environments.",
                    runner_id, hello.run_id, hello.num_envs)
        try:
            await self._step_loop(stream, context, loop, hello)
        finally:
            if self._owners.get(runner_id) is stream:
                # Only the owner disconnects: a replaced stream's slots were already freed
                # by its successor's `connect`. run_id guards the same case inside the
                # server, should another service share it.
                del self._owners[runner_id]
                self._server.disconnect(runner_id, hello.run_id)
                logger.info("Runner %s (run %s) disconnected.", runner_id, hello.run_id)

    def _read_hello(self, message: bytes) -> wire.Hello:
        try:
            kind = wire.message_kind(message)
            if kind != wire.MessageKind.HELLO:
                raise wire.WireError(f"the first message must be HELLO, got {kind.name}")
            hello = wire.decode_hello(message)
        except wire.WireError as error:
            raise _Reject(grpc.StatusCode.INVALID_ARGUMENT, f"bad HELLO: {error}") from None
        if (problem := self._hello_problem(hello)) is not None:
            raise _Reject(grpc.StatusCode.INVALID_ARGUMENT, f"bad HELLO: {problem}")
        if hello.num_envs > self._max_envs_per_stream:
            raise _Reject(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{hello.num_envs} environments on one stream, more than this "
                          f"service's max_envs_per_stream={self._max_envs_per_stream}")
        return hello

    def _hello_problem(self, hello: wire.Hello) -> str | None:
        if not hello.runner_id:
            return "runner_id is empty"
        if not hello.run_id:
            return "run_id is empty (it tells a restarted runner from the old one)"
        if hello.observation_shape != self._obs_shape:
            if self._obs_shape != self._stacked_shape:
                return (f"observation shape {hello.observation_shape}: this service stacks "
                        f"frames itself and takes one frame, {self._obs_shape}, of the "
                        f"spec's {self._stacked_shape} (an Atari runner: stack=1 in its "
                        "environment id)")
            return (f"observation shape {hello.observation_shape} does not match the "
                    f"spec's {self._obs_shape}")
        if hello.observation_dtype != self._obs_dtype:
            return (f"observation dtype {hello.observation_dtype} does not match the "
                    f"spec's {self._obs_dtype}")
        ours = _describe_actions(self._action_dtype, self._action_shape, self._num_actions)
        theirs = _describe_actions(hello.action_dtype, hello.action_shape, hello.num_actions)
        if ours != theirs:
            return f"the runner expects {theirs}, this server serves {ours}"
        return None

    def _connect(self, stream: _Stream, hello: wire.Hello) -> None:
        runner_id = hello.runner_id
        try:
            # Evicts a predecessor with this id (its slots are freed: a restarted
            # runner's old stream may not be noticed dead yet).
            self._server.connect(runner_id, hello.num_envs, hello.run_id)
        except ValueError as error:
            raise _Reject(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)) from None
        previous = self._owners.get(runner_id)
        self._owners[runner_id] = stream
        if previous is not None:
            previous.end((grpc.StatusCode.ABORTED,
                          f"a newer stream of runner {runner_id!r} took over"))

    async def _step_loop(self, stream: _Stream, context: grpc.aio.ServicerContext,
                         loop: asyncio.AbstractEventLoop, hello: wire.Hello) -> None:
        runner_id, num_envs = hello.runner_id, hello.num_envs
        step_types = StepTypeTracker(num_envs)
        idle_timeout_s = self._idle_timeout_s
        stream.deadline = loop.time() + idle_timeout_s
        stream.deadline_status = (grpc.StatusCode.DEADLINE_EXCEEDED,
                                  f"no step batch within {idle_timeout_s:g} s")
        decode, encode = wire.decode_step_batch, wire.encode_actions
        obs_shape, obs_dtype = self._obs_shape, self._obs_dtype
        submit = self._server.submit
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            self.bytes_received += len(message)
            stream.deadline = math.inf  # Waiting for our answer is not the runner's doing.
            try:
                batch = decode(message, num_envs, obs_shape, obs_dtype)
                step_types.check(batch.step_type)
            except ValueError as error:  # WireError and StepOrderError are ValueErrors.
                raise _Reject(grpc.StatusCode.INVALID_ARGUMENT,
                              _message_problem(message, error)) from None
            stream.future = future = loop.create_future()
            try:
                submit(runner_id, batch, stream.callback, True)  # decoded: validated
                actions = await future
            except BatcherClosedError:
                raise _Reject(grpc.StatusCode.UNAVAILABLE,
                              "the inference server is shutting down") from None
            except ValueError as error:
                raise _Reject(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
            except Exception as error:  # noqa: BLE001 - the policy failed: tell the runner
                logger.exception("Inference failed on a batch of runner %s.", runner_id)
                raise _Reject(grpc.StatusCode.INTERNAL,
                              f"inference failed: {type(error).__name__}") from None
            try:
                answer = encode(actions)
            except ValueError as error:  # Our policy's bug: never send it, never hide it.
                logger.error("Cannot send the actions for runner %s: %s", runner_id, error)
                raise _Reject(grpc.StatusCode.INTERNAL,
                              f"the policy's actions cannot be sent: {error}") from None
            stream.deadline = loop.time() + idle_timeout_s
            self.bytes_sent += len(answer)
            await context.write(answer)


def _finish_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancels the tasks still pending on a stopped loop and lets them unwind.

    As `asyncio.run` does before it closes its loop: a task left pending on a closed loop
    (a handler gRPC has not finished, a stuck server stop) would be closed by the garbage
    collector later, in whatever thread collects it, running its cleanup there.
    """
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=_STOP_CLEANUP_S))
    loop.run_until_complete(loop.shutdown_asyncgens())


def _check_port_free(address: str, host: str, port: str) -> None:
    """Raises OSError when something listens on `host:port` already.

    The service's servers share their port with each other (SO_REUSEPORT), which would
    also let them share it with another service that does the same: a plain bind first
    makes a second service on a busy port fail at start, as an exclusive bind would.
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port),
                                   type=socket.SOCK_STREAM)
    except (OSError, ValueError) as error:
        raise OSError(f"InferenceService could not bind {address!r}: {error}") from error
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
            try:
                probe.bind(sockaddr)
            except OSError as error:
                raise OSError(f"InferenceService could not bind {address!r}: the port is in "
                              f"use ({error.strerror}).") from error


def _describe_actions(dtype: np.dtype, shape: tuple[int, ...], num_actions: int) -> str:
    if num_actions:
        return f"discrete actions (int32, {num_actions} actions)"
    return f"continuous actions (float32 of shape {shape})"


def _message_problem(message: bytes, error: ValueError) -> str:
    """Names a bad message: another HELLO or an ACTIONS is a protocol error, not a
    malformed step batch."""
    try:
        kind = wire.message_kind(message)
    except wire.WireError:
        return str(error)
    if kind == wire.MessageKind.HELLO:
        return "a second HELLO on one stream"
    if kind != wire.MessageKind.STEP_BATCH:
        return f"expected STEP_BATCH, got {kind.name}"
    return str(error)

