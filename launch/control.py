"""The learner's control service: progress counts for the launcher, variables for the
evaluator. Two unary gRPC methods over raw bytes: `Status` answers JSON, `Variables`
answers the policy's variables as an .npz archive (loaded with allow_pickle=False: no
pickle crosses the network).

It is guarded as the inference service is (`seed_agents.inference.security`): the run's
token as `authorization: Bearer` metadata on every call, TLS when the run has it. The
variables are the trained model and the status the run's progress: without the token a
caller gets UNAUTHENTICATED and not one byte of either.
"""

from __future__ import annotations

import hmac
import io
import json
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import numpy as np

from seed_agents.inference.grpc_client import AUTH_METADATA_KEY, bearer
from seed_agents.inference.security import TLSConfig

_SERVICE = "seed_agents.Control"
_OPTIONS = [("grpc.max_send_message_length", 256 << 20),
            ("grpc.max_receive_message_length", 256 << 20)]
# Requests are empty: a peer, with the token or without, may send no more than this before
# gRPC refuses the message (RESOURCE_EXHAUSTED), so no caller can make the server hold
# large buffers. Only answers (the variables) are large.
_SERVER_OPTIONS = [("grpc.max_send_message_length", 256 << 20),
                   ("grpc.max_receive_message_length", 1024)]


class ControlService:
    """Serves `status()` (a JSON-able dict) and `variables()` (a list of arrays).

    `auth_token`: every call must carry it (None: no check, for tests of the service
    alone); `server_credentials`: serve TLS (grpc.ssl_server_credentials) instead of
    plain TCP.
    """

    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        variables: Callable[[], list[np.ndarray]],
        address: str = "127.0.0.1:0",
        auth_token: str | None = None,
        server_credentials: grpc.ServerCredentials | None = None,
    ):
        self._status = status
        self._variables = variables
        self._expected_auth = bearer(auth_token).encode() if auth_token else None
        self._executor = futures.ThreadPoolExecutor(max_workers=4,
                                                    thread_name_prefix="control")
        self._server = grpc.server(self._executor, options=_SERVER_OPTIONS)
        handlers = {
            "Status": grpc.unary_unary_rpc_method_handler(self._handle_status),
            "Variables": grpc.unary_unary_rpc_method_handler(self._handle_variables),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, handlers),)
        )
        host = address.rsplit(":", 1)[0]
        port = (self._server.add_secure_port(address, server_credentials)
                if server_credentials is not None else self._server.add_insecure_port(address))
        if port == 0:
            raise OSError(f"Control service could not bind {address!r}.")
        self.address = f"{host}:{port}"

    def start(self) -> str:
        self._server.start()
        return self.address

    def stop(self, grace_s: float = 0.5) -> None:
        self._server.stop(grace_s).wait()
        self._executor.shutdown(wait=True)  # gRPC leaves its handlers' threads running

    def _check_token(self, context: grpc.ServicerContext) -> None:
        """Aborts the call (UNAUTHENTICATED) unless it carries the run's token."""
        if self._expected_auth is None:
            return
        for key, value in context.invocation_metadata() or ():
            if key == AUTH_METADATA_KEY:
                got = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(got, self._expected_auth):
                    return
                break
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

    def _handle_status(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._check_token(context)
        return json.dumps(self._status()).encode()

    def _handle_variables(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self._check_token(context)
        buffer = io.BytesIO()
        np.savez(buffer, *self._variables())
        return buffer.getvalue()


class ControlClient:
    """Reads a learner's status and variables; every call has a deadline, and carries
    `auth_token` when given, over TLS trusting `tls`'s CA when given."""

    def __init__(self, address: str, timeout_s: float = 10.0, auth_token: str | None = None,
                 tls: TLSConfig | None = None):
        self.address = address
        self._timeout_s = timeout_s
        self._metadata = ((AUTH_METADATA_KEY, bearer(auth_token)),) if auth_token else None
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, tls.channel_credentials(),
                                                options=[*_OPTIONS, *tls.channel_options()])
        self._status = self._channel.unary_unary(f"/{_SERVICE}/Status")
        self._variables = self._channel.unary_unary(f"/{_SERVICE}/Variables")

    def status(self) -> dict[str, Any]:
        return json.loads(self._status(b"", timeout=self._timeout_s, metadata=self._metadata))

    def variables(self) -> list[np.ndarray]:
        answer = self._variables(b"", timeout=self._timeout_s, metadata=self._metadata)
        archive = np.load(io.BytesIO(answer), allow_pickle=False)
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]

    def close(self) -> None:
        self._channel.close()
