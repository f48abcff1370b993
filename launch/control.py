"""The learner's control service: progress counts for the launcher, variables for the
evaluator. Two unary gRPC methods over raw bytes: `Status` answers JSON, `Variables`
answers the policy's variables as an .npz archive (loaded with allow_pickle=False: no
pickle crosses the network).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import numpy as np

_SERVICE = "seed_agents.Control"
_OPTIONS = [("grpc.max_send_message_length", 256 << 20),
            ("grpc.max_receive_message_length", 256 << 20)]


class ControlService:
    """Serves `status()` (a JSON-able dict) and `variables()` (a list of arrays)."""

    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        variables: Callable[[], list[np.ndarray]],
        address: str = "127.0.0.1:0",
    ):
        self._status = status
        self._variables = variables
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_OPTIONS)
        handlers = {
            "Status": grpc.unary_unary_rpc_method_handler(self._handle_status),
            "Variables": grpc.unary_unary_rpc_method_handler(self._handle_variables),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, handlers),)
        )
        host = address.rsplit(":", 1)[0]
        port = self._server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"Control service could not bind {address!r}.")
        self.address = f"{host}:{port}"

    def start(self) -> str:
        self._server.start()
        return self.address

    def stop(self, grace_s: float = 0.5) -> None:
        self._server.stop(grace_s).wait()

    def _handle_status(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return json.dumps(self._status()).encode()

    def _handle_variables(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, *self._variables())
        return buffer.getvalue()


class ControlClient:
    """Reads a learner's status and variables; every call has a deadline."""

    def __init__(self, address: str, timeout_s: float = 10.0):
        self.address = address
        self._timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address, options=_OPTIONS)
        self._status = self._channel.unary_unary(f"/{_SERVICE}/Status")
        self._variables = self._channel.unary_unary(f"/{_SERVICE}/Variables")

    def status(self) -> dict[str, Any]:
        return json.loads(self._status(b"", timeout=self._timeout_s))

    def variables(self) -> list[np.ndarray]:
        archive = np.load(io.BytesIO(self._variables(b"", timeout=self._timeout_s)),
                          allow_pickle=False)
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]

    def close(self) -> None:
        self._channel.close()
