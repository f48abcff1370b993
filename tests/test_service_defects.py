"""Issue 13's defects, each replayed by a raw gRPC client that builds its bytes by hand.

The client side imports nothing from the project: the wire format is written out here
with `struct` (protocol version 2), the way an outside implementation or a hostile peer
would send it. The server side is the real one: `InferenceService` over an
`InferenceServer` writing to a real Reverb table. Every stream and server a test starts
is stopped by it; every address is loopback.
"""

from __future__ import annotations

import logging
import queue
import re
import struct
import time

import grpc
import numpy as np
import pytest

from seed_agents.inference.grpc_service import InferenceService
from tests.test_inference_server import SPEC, Setup, T

STREAM_METHOD = "/seed_agents.Inference/Stream"
FIRST, MID, LAST = 0, 1, 2
TOKEN = "tok3n"


# -- the wire, by hand (little-endian; see seed_agents/inference/wire.py) -------------------


def hello(runner_id: bytes = b"r", run_id: bytes = b"run", k: int = 2, num_actions: int = 2,
          action: tuple[int, tuple[int, ...]] = (4, ()), version: int = 2) -> bytes:
    """HELLO: float32 (2,) observations; actions (dtype code, shape): (4, ()) is int32."""
    code, shape = action
    return b"".join([
        b"SA", bytes([version, 1]),
        struct.pack("<IIBBHHBB", k, num_actions, 7, 1, len(runner_id), len(run_id), code,
                    len(shape)),
        struct.pack("<I", 2), struct.pack(f"<{len(shape)}I", *shape), runner_id, run_id,
    ])


def batch(step_types, obs=None, reward=None, discount=None) -> bytes:
    """STEP_BATCH of K float32 (2,) observations."""
    k = len(step_types)
    obs = np.ones((k, 2)) if obs is None else np.asarray(obs, float)
    reward = [0.0] * k if reward is None else reward
    discount = [1.0] * k if discount is None else discount
    head = b"SA" + bytes([2, 2]) + struct.pack("<IBBHI", k, 7, 1, 0, 2)
    scalars = struct.pack(f"<{k}f{k}f", *reward, *discount) + bytes(step_types)
    padding = bytes(-(len(head) + len(scalars)) % 8)
    return head + scalars + padding + struct.pack(f"<{2 * k}f", *obs.ravel())


def actions_of(reply: bytes) -> list[int]:
    """The int32 actions of an ACTIONS reply."""
    assert reply[:4] == b"SA" + bytes([2, 3])
    k, code, ndim, _ = struct.unpack_from("<IBBH", reply, 4)
    assert (code, ndim) == (4, 0)
    return list(struct.unpack_from(f"<{k}i", reply, 12))


class RawStream:
    """One bidirectional stream driven message by message from the test."""

    def __init__(self, channel: grpc.Channel, metadata=None):
        self._outbox: queue.Queue = queue.Queue()
        self.call = channel.stream_stream(STREAM_METHOD)(
            iter(self._outbox.get, None), metadata=metadata, timeout=60)

    def send(self, *messages: bytes) -> None:
        for message in messages:
            self._outbox.put(message)

    def round_trip(self, message: bytes) -> bytes:
        self.send(message)
        return next(self.call)

    def status(self, half_close: bool = True) -> tuple[grpc.StatusCode, str]:
        """Half-closes (unless told not to: then the server must end it), reads to the
        end: the final status."""
        if half_close:
            self._outbox.put(None)
        try:
            for _ in self.call:
                pass
        except grpc.RpcError as error:
            return error.code(), error.details()
        finally:
            # gRPC's thread that reads the outbox waits for its end even after the call
            # ended: without it, the thread outlives the test.
            self._outbox.put(None)
        return grpc.StatusCode.OK, ""

    def cancel(self) -> None:
        self.call.cancel()
        self._outbox.put(None)


def one_shot(channel, messages, metadata=None) -> tuple[list[bytes], grpc.StatusCode, str]:
    call = channel.stream_stream(STREAM_METHOD)(iter(messages), metadata=metadata, timeout=30)
    replies = []
    try:
        for reply in call:
            replies.append(reply)
    except grpc.RpcError as error:
        return replies, error.code(), error.details()
    return replies, grpc.StatusCode.OK, ""


def wait_for(condition, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def auth(token: str = TOKEN):
    return [("authorization", f"Bearer {token}")]


@pytest.fixture
def serve():
    """`serve(**service_kwargs)` -> (setup, service, channel); all stopped afterwards."""
    started = []

    def start(setup_kwargs=None, **kwargs):
        setup = Setup(**(setup_kwargs or dict(max_envs=8, max_batch_size=8)))
        service = InferenceService(setup.server, SPEC, **kwargs)
        channel = grpc.insecure_channel(service.start())
        started.append((setup, service, channel))
        return setup, service, channel

    yield start
    for setup, service, channel in started:
        channel.close()
        service.stop(grace_s=0.2)
        setup.close()


def test_the_stream_method_is_the_projects():
    from seed_agents.inference.grpc_client import STREAM_METHOD as theirs

    assert STREAM_METHOD == theirs


# -- 1. an empty run id leaked slots forever ------------------------------------------------


def test_an_empty_run_id_is_refused_and_leaks_no_slot(serve):
    setup, service, channel = serve()
    # The issue's HELLO (protocol 1, runner "leak-0", empty run id, 4 envs) and its batch.
    issue_hello = bytes.fromhex("534101010400000002000000070106000000040000006c65616b2d30")
    _, code, details = one_shot(channel, [issue_hello])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "protocol version 1 is not supported" in details and "speaks 2" in details
    # The same HELLO in protocol 2, asking for every free slot with an empty run id.
    _, code, details = one_shot(channel, [hello(b"leak-0", b"", k=8), batch([FIRST] * 8)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "run_id is empty" in details
    wait_for(lambda: service.active_streams == 0, what="the stream's cleanup")
    assert setup.server.num_clients == 0
    # Every slot is free: a runner asking for all of them is served.
    replies, code, details = one_shot(channel, [hello(b"next", k=8), batch([FIRST] * 8)])
    assert code == grpc.StatusCode.OK, details
    assert len(actions_of(replies[0])) == 8
    with pytest.raises(ValueError, match="run_id must not be empty"):
        setup.server.connect("direct", 1, run_id="")


# -- 2. no deadline before HELLO ------------------------------------------------------------


def test_silent_streams_are_ended_and_a_full_service_answers_at_once(serve):
    setup, service, channel = serve(max_streams=2, hello_timeout_s=0.5, idle_timeout_s=0.5)
    silent = [RawStream(channel) for _ in range(2)]
    wait_for(lambda: service.active_streams == 2, what="the silent streams to be open")
    # The cap is reached: one more stream is refused at once, while both still hold on.
    _, code, details = one_shot(channel, [hello(b"late"), batch([FIRST, FIRST])])
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "maximum of 2 streams" in details
    assert service.active_streams == 2
    for stream in silent:
        code, details = stream.status(half_close=False)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "no HELLO within 0.5 s" in details
    # A stream that said HELLO and went quiet loses its slots too.
    quiet = RawStream(channel)
    quiet.send(hello(b"quiet", k=8))
    quiet.round_trip(batch([FIRST] * 8))
    code, details = quiet.status(half_close=False)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "no step batch within 0.5 s" in details
    wait_for(lambda: setup.server.num_clients == 0, what="the quiet stream's slots")
    replies, code, details = one_shot(channel, [hello(b"after", k=8), batch([FIRST] * 8)])
    assert code == grpc.StatusCode.OK, details


# -- 3. one idle client slowed everyone ------------------------------------------------------


def test_an_idle_client_does_not_hold_other_batches_back(serve):
    # Batches wait up to 2 s for every client expected; a client silent for 0.2 s is not.
    setup, service, channel = serve(setup_kwargs=dict(
        max_envs=8, max_batch_size=8, max_wait_ms=2000.0, active_window_ms=200.0))
    idle_hello_only = RawStream(channel)
    idle_hello_only.send(hello(b"idle-a"))
    idle_after_a_step = RawStream(channel)
    idle_after_a_step.send(hello(b"idle-b"))
    idle_after_a_step.round_trip(batch([FIRST, FIRST]))  # then silent
    wait_for(lambda: setup.server.num_clients == 2, what="the idle clients")
    good = RawStream(channel)
    good.send(hello(b"good"))
    times = []
    for i in range(12):
        start = time.monotonic()
        good.round_trip(batch([FIRST if i == 0 else MID] * 2))
        times.append(time.monotonic() - start)
    # At most the first round trips (while idle-b still counted as active) waited out the
    # 2 s; the rest closed at once: the median is far below the wait.
    assert float(np.median(times)) < 0.5, times
    assert setup.server.batcher.expected_callers() == 1
    for stream in (idle_hello_only, idle_after_a_step, good):
        stream.cancel()


# -- 4. runner ids could be taken over by anyone who can connect -----------------------------


def test_without_the_token_no_stream_gets_in_or_takes_a_runner_over(serve):
    setup, service, channel = serve(auth_token=TOKEN)
    runner = RawStream(channel, auth())
    runner.send(hello(b"runner-0"))
    runner.round_trip(batch([FIRST, FIRST]))
    for metadata in (None, auth("wrong"), [("authorization", TOKEN)]):
        _, code, _ = one_shot(channel, [hello(b"runner-0", b"evil"), batch([FIRST, FIRST])],
                              metadata)
        assert code == grpc.StatusCode.UNAUTHENTICATED, metadata
    for _ in range(3):  # the real runner was never replaced
        assert len(actions_of(runner.round_trip(batch([MID, MID])))) == 2
    assert runner.status()[0] == grpc.StatusCode.OK


# -- 5. step types and values were checked only partly ---------------------------------------


@pytest.mark.parametrize("name, second, problem", [
    ("MID after LAST", batch([MID, MID]), r"environment 0: step_type MID after LAST"),
    ("LAST twice", batch([LAST, MID]), r"environment 0: step_type LAST after LAST"),
    ("FIRST in an episode", batch([FIRST, FIRST]), r"environment 1: step_type FIRST after MID"),
    ("NaN observation", batch([FIRST, MID], obs=[[0, 0], [0, np.nan]]),
     r"observation\[1\] holds nan"),
    ("inf observation", batch([FIRST, MID], obs=[[np.inf, 0], [0, 0]]),
     r"observation\[0\] holds inf"),
    ("NaN reward", batch([FIRST, MID], reward=[0, np.nan]), r"reward\[1\] is nan"),
    ("inf discount", batch([FIRST, MID], discount=[1, np.inf]), r"discount\[1\] is inf"),
])
def test_out_of_order_or_non_finite_steps_end_the_stream_and_store_nothing(
        serve, name, second, problem):
    setup, service, channel = serve()
    # Environment 0 ends its episode (LAST) while environment 1 is in the middle of one.
    messages = [hello(b"bad"), batch([FIRST, FIRST]), batch([LAST, MID])]
    replies, code, details = one_shot(channel, messages + [second])
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, details)
    assert re.search(problem, details), (name, details)
    assert len(replies) == len(messages) - 1
    wait_for(lambda: setup.server.num_clients == 0, what="the stream's cleanup")
    assert T + 1 > 3 and setup.items() == []  # no environment completed an unroll


def test_each_environment_follows_its_own_step_order(serve):
    setup, service, channel = serve()
    messages = [hello(b"ok"), batch([FIRST, FIRST]), batch([LAST, MID]), batch([FIRST, LAST]),
                batch([MID, FIRST]), batch([LAST, MID]), batch([FIRST, MID])]
    replies, code, details = one_shot(channel, messages)
    assert code == grpc.StatusCode.OK, details
    assert len(replies) == len(messages) - 1


# -- 6. memory on a peer's say-so -------------------------------------------------------------


def test_messages_larger_than_the_declared_batch_are_refused(serve):
    setup, service, channel = serve(max_envs_per_stream=4)
    # The largest message the service takes is a step batch of 4 environments.
    assert service.max_message_bytes == max(596, len(batch([FIRST] * 4)))
    _, code, _ = one_shot(channel, [b"SA" + bytes(1 << 20)])  # before HELLO
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    _, code, _ = one_shot(channel, [hello(), batch([FIRST, FIRST]) + bytes(1 << 16)])
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Within the limit but not what HELLO declared (K=2): refused before anything is kept.
    _, code, details = one_shot(channel, [hello(), batch([FIRST] * 3)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "3 environments, expected 2" in details
    _, code, details = one_shot(channel, [hello(k=5)])
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_envs_per_stream=4" in details
    wait_for(lambda: setup.server.num_clients == 0, what="cleanup")


# -- 8. one warning per rejected stream -------------------------------------------------------


def test_repeated_rejections_are_summarised_per_peer(serve, caplog):
    setup, service, channel = serve(auth_token=TOKEN, rejection_log_interval_s=3600.0)
    caplog.set_level(logging.WARNING, logger="seed_agents.inference.grpc_service")
    for _ in range(40):
        _, code, _ = one_shot(channel, [hello()], auth("wrong"))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    for _ in range(5):
        _, code, _ = one_shot(channel, [b"junk"], auth())
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    service.stop(grace_s=0.2)  # writes the summaries that are still due
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("grpc_service")]
    assert len(lines) == 2, lines
    assert lines[0].startswith("Rejected a stream from ipv4:127.0.0.1:")
    assert re.match(r"Rejected 44 more streams from ipv4:127\.0\.0\.1 in the last \d+ s "
                    r"\(UNAUTHENTICATED 39, INVALID_ARGUMENT 5\); the last: INVALID_ARGUMENT",
                    lines[1]), lines[1]
    assert service.rejected == {"UNAUTHENTICATED": 40, "INVALID_ARGUMENT": 5}
