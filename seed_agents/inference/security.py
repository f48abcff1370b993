"""Who may talk to the inference service: a run's shared token, and TLS across hosts.

Every launcher runs the service with a token: a fresh random one per run (`make_token`),
or one read from a file (`read_token_file`) that the user manages. Runners send it as
`authorization: Bearer <token>` metadata on their stream; the service refuses a stream
without it (UNAUTHENTICATED). A token authenticates and does not encrypt: beyond one
machine or a trusted network, add TLS (`TLSConfig`) so that neither the token nor the
observations travel in clear.

Imports grpc and the standard library only: runner processes use it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import grpc

TOKEN_ENV = "SEED_AGENTS_INFERENCE_TOKEN"
"""Where the runner CLI (`python -m seed_agents.inference.runner_process`) finds the
token: the environment, not argv, which every user of the machine can read."""

DEFAULT_TLS_SERVER_NAME = "seed-agents-inference"


def make_token() -> str:
    """A fresh random token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in the file at `path` (surrounding whitespace stripped).

    Raises ValueError when the file is missing, unreadable, empty, or holds more than
    one line: a token that silently differs between learner and runners only shows up
    later, as every runner refused.
    """
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ValueError(f"Cannot read the inference token file {path}: {error}") from None
    token = text.strip()
    if not token:
        raise ValueError(f"The inference token file {path} is empty.")
    if any(c.isspace() for c in token):
        raise ValueError(f"The inference token file {path} holds more than one word; "
                         "it must hold the token alone.")
    return token


def _read_pem(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"Cannot read the TLS {what} {path} on this machine: {error}") from None


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    """TLS for the inference service: paths to PEM files, read where they are used.

    Attributes:
      cert: the service's certificate chain (the learner's machine needs it).
      key: the certificate's private key (the learner's machine only).
      ca: the certificate that signed `cert`, which runners trust; None trusts `cert`
        itself (a self-signed certificate). Runners need `ca` (or `cert`), never `key`.
      server_name: the name runners expect in the certificate (its subjectAltName),
        whatever address they dial: learner IPs change from run to run, a name does not.
        None checks the dialled host instead.

    The files must exist at these paths on the machines that use them (on Kubernetes, a
    Secret mounted into every pod).
    """

    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    server_name: str | None = DEFAULT_TLS_SERVER_NAME

    def __post_init__(self):
        if self.key and not self.cert:
            raise ValueError("A TLS private key (--tls-key) needs its certificate (--tls-cert).")
        if not (self.cert or self.ca):
            raise ValueError("TLS needs a certificate (--tls-cert) or a CA (--tls-ca).")

    def server_credentials(self) -> grpc.ServerCredentials:
        """The service's credentials (reads cert and key)."""
        if not (self.cert and self.key):
            raise ValueError("The inference service needs a TLS certificate and its key.")
        return grpc.ssl_server_credentials(
            [(_read_pem(self.key, "private key"), _read_pem(self.cert, "certificate"))])

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A runner's credentials: trusts `ca`, or `cert` when there is no CA."""
        trusted = self.ca or self.cert
        return grpc.ssl_channel_credentials(_read_pem(trusted, "CA certificate"))

    def channel_options(self) -> Sequence[tuple[str, str]]:
        """Channel options that make a runner check `server_name` in the certificate."""
        if self.server_name is None:
            return ()
        return (("grpc.ssl_target_name_override", self.server_name),)
