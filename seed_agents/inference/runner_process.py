"""An environment runner as a process: K environments driven by a remote inference server.

`run_runner` (or the `python -m seed_agents.inference.runner_process` CLI) builds the
environments once and steps them through `RemoteInference`, reconnecting when the server
goes away or restarts. It imports neither TensorFlow nor Reverb.

What a reconnect loses: the episodes in progress. A new stream starts with every
environment reset (an all-FIRST batch), and the server discards the unrolls the old
stream had not completed. Nothing already written to replay is affected.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from typing import Any

import grpc

from seed_agents.envs.registry import EnvironmentFactory, environment_factory
from seed_agents.inference import wire
from seed_agents.inference.grpc_client import RemoteInference
from seed_agents.inference.runner import EnvRunner, runner_reporter
from seed_agents.inference.security import TOKEN_ENV, TLSConfig, read_token_file
from seed_agents.utils.affinity import pin_to_cpu

logger = logging.getLogger(__name__)

AUTH_TOKEN_ENV = TOKEN_ENV
_INITIAL_BACKOFF_S = 0.1

# The server is gone, restarting or unreachable: worth another stream.
_RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
# How gRPC reports an HTTP/2 stream reset by the peer (e.g. a proxy or a dying server).
_RESET_MARKERS = ("RST_STREAM", "Stream removed", "Socket closed")


class InferenceRejectedError(RuntimeError):
    """The server refused this runner for a reason another attempt would not fix."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def is_retryable(error: grpc.RpcError) -> bool:
    """Whether `error` means the server is gone or restarting, not that we are wrong."""
    code = error.code() if callable(getattr(error, "code", None)) else None
    if code in _RETRYABLE:
        return True
    details = error.details() if callable(getattr(error, "details", None)) else ""
    return code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and any(
        marker in (details or "") for marker in _RESET_MARKERS
    )


@dataclasses.dataclass
class RunnerStats:
    rounds: int = 0  # Round trips completed (each steps every environment once).
    env_steps: int = 0
    reconnects: int = 0  # Streams opened after a retryable failure.


class RemoteRunner:
    """An `EnvRunner` bound to a remote server, with reconnects; `run_runner` drives one.

    `run_id` identifies this process's lifetime: it stays the same across reconnects, and
    a restarted process gets a new one, so the server can tell them apart. `stats` is
    updated as it runs (readable from another thread). Its HELLO comes from the
    environments' specs (discrete or continuous actions). `tls` (the CA to trust and the
    name to expect) replaces `channel_credentials` when given. With `groups` > 1 the
    environments step in that many groups, each on its own stream (`<runner_id>/<g>`,
    one `run_id`), one group stepping while the others' actions are in flight.
    """

    def __init__(
        self,
        address: str,
        environment: str | EnvironmentFactory,
        num_envs: int,
        seed: int = 0,
        runner_id: str | None = None,
        run_id: str | None = None,
        auth_token: str | None = None,
        max_backoff_s: float = 5.0,
        timeout_s: float = 60.0,
        channel_credentials: grpc.ChannelCredentials | None = None,
        tls: TLSConfig | None = None,
        groups: int = 1,
    ):
        if max_backoff_s < _INITIAL_BACKOFF_S:
            raise ValueError(f"max_backoff_s must be >= {_INITIAL_BACKOFF_S}, got {max_backoff_s}.")
        self.address = address
        self.runner = EnvRunner(environment_factory(environment), num_envs, seed, groups)
        env = self.runner.envs[0]
        runner_id = runner_id or f"{socket.gethostname()}-{os.getpid()}"
        run_id = run_id or uuid.uuid4().hex
        self.hello = wire.hello_from_specs(runner_id, run_id, num_envs, env.observation_spec(),
                                           env.action_spec())
        # One stream per group, under one run_id: the server batches them as one runner.
        sizes = self.runner.group_sizes
        self.hellos = [dataclasses.replace(self.hello, num_envs=sizes[0])] if groups == 1 else [
            dataclasses.replace(self.hello, runner_id=f"{runner_id}/{g}", num_envs=n)
            for g, n in enumerate(sizes)]
        self._auth_token = auth_token
        self._credentials = channel_credentials
        self._channel_options = ()
        if tls is not None:
            self._credentials = tls.channel_credentials()
            self._channel_options = tls.channel_options()
        self._timeout_s = timeout_s
        self._max_backoff_s = max_backoff_s
        self._reconnects = 0

    def run(self, stop_event: threading.Event | None = None, max_steps: int | None = None) -> None:
        """Steps until `stop_event` is set or `max_steps` round trips are done in total.

        Blocks, retrying with backoff (0.1 s doubling up to `max_backoff_s`, reset after
        a stream that got actions) while the server is unreachable. Raises
        `InferenceRejectedError` when the server rejects the runner (bad spec, bad token,
        no capacity, bad data): retrying would be rejected again.
        """
        stop_event = stop_event or threading.Event()
        backoff = _INITIAL_BACKOFF_S
        attempt = 0
        while not stop_event.is_set() and not self._done(max_steps):
            if attempt:
                self._reconnects += 1
            attempt += 1
            before = self.runner.rounds
            try:
                with contextlib.ExitStack() as streams:
                    channels = [streams.enter_context(RemoteInference(
                        self.address, hello, self._auth_token, self._credentials,
                        self._timeout_s, self._channel_options)) for hello in self.hellos]
                    remaining = None if max_steps is None else max_steps - self.runner.rounds
                    self.runner.run(channels, stop_event, remaining)
                return
            except grpc.RpcError as error:
                if not is_retryable(error):
                    raise InferenceRejectedError(
                        error.code(),
                        f"Inference server at {self.address} rejected runner "
                        f"{self.hello.runner_id!r}: {error.code().name}: {error.details()}",
                    ) from error
                if self.runner.rounds > before:
                    backoff = _INITIAL_BACKOFF_S
                logger.warning(
                    "Runner %s cannot reach the inference server at %s (%s: %s); retry in %.1f s.",
                    self.hello.runner_id, self.address, error.code().name, error.details(),
                    backoff,
                )
                stop_event.wait(backoff)
                backoff = min(2 * backoff, self._max_backoff_s)

    def _done(self, max_steps: int | None) -> bool:
        return max_steps is not None and self.runner.rounds >= max_steps

    def figures(self) -> dict[str, Any]:
        """The runner's cumulative figures (`EnvRunner.figures`) plus its reconnects."""
        return {**self.runner.figures(), "reconnects": self._reconnects}

    @property
    def stats(self) -> RunnerStats:
        """A snapshot of progress, derived from the runner (safe to read from any thread)."""
        return RunnerStats(self.runner.rounds, self.runner.env_steps, self._reconnects)

    def close(self) -> None:
        self.runner.close()


def run_runner(
    address: str,
    environment: str | EnvironmentFactory,
    num_envs: int,
    stop_event: threading.Event | None = None,
    max_steps: int | None = None,
    logdir: str | None = None,
    log_every_s: float = 5.0,
    cpu: int | None = None,
    **options: Any,
) -> RunnerStats:
    """Runs `num_envs` environments against the server at `address`; returns the stats.

    `options` are `RemoteRunner`'s (seed, runner_id, run_id, auth_token, max_backoff_s,
    timeout_s, tls, groups); `run_id` defaults to a fresh uuid per call (one process start). See
    `RemoteRunner.run` for when it blocks, retries and raises. With `logdir`, the
    runner's rates (`runner_rates`: env steps/s, its round trip p50/p99, env and
    inference time shares) go to `<logdir>/<runner_id>.csv` every `log_every_s`. With
    `cpu`, the runner first pins itself to the `cpu`-th of the CPUs it may run on
    (`pin_to_cpu`), before its environments and gRPC's threads exist.
    """
    if cpu is not None:
        pin_to_cpu(cpu)
    runner = RemoteRunner(address, environment, num_envs, **options)
    reporter = (runner_reporter(runner.figures, logdir, runner.hello.runner_id, log_every_s)
                if logdir else None)
    try:
        runner.run(stop_event, max_steps)
    finally:
        try:
            if reporter is not None:
                reporter.close()
        finally:
            runner.close()
    return runner.stats


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; SIGTERM and SIGINT stop it after the round trip in flight."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="host:port or unix:/path")
    parser.add_argument("--env", required=True, help="environment id, e.g. fake:obs=4")
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--groups", type=int, default=1,
                        help="groups of environments stepped alternately: 2 steps one group "
                             "while the other's actions are in flight (default: lockstep)")
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin this runner to the N-th of the CPUs it may run on (modulo "
                             "their number): one runner per core keeps each one's emulators "
                             "in that core's caches (default: not pinned)")
    parser.add_argument("--runner-id", default=None)
    parser.add_argument("--run-id", default=None, help="default: a fresh uuid")
    parser.add_argument("--max-steps", type=int, default=None, help="round trips in total")
    parser.add_argument("--max-backoff-s", type=float, default=5.0)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--logdir", default=None,
                        help="write this runner's rates to <logdir>/<runner id>.csv")
    parser.add_argument("--token-file", default=None,
                        help=f"file holding the service's token (default: ${TOKEN_ENV})")
    parser.add_argument("--tls-ca", default=None,
                        help="PEM certificate to trust: connect with TLS (the service's CA "
                             "or its self-signed certificate)")
    parser.add_argument("--tls-server-name", default=TLSConfig.server_name,
                        help="name expected in the service's certificate "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        # From a file or the environment, not argv: a command line is visible to every user.
        token = (read_token_file(args.token_file) if args.token_file
                 else os.environ.get(TOKEN_ENV) or None)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tls = None
    if args.tls_ca:
        # A runner needs only what it trusts; cert and key stay on the learner's machine.
        tls = TLSConfig(ca=args.tls_ca, server_name=args.tls_server_name or None)

    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    try:
        stats = run_runner(
            args.address, args.env, args.num_envs, seed=args.seed, runner_id=args.runner_id,
            run_id=args.run_id, stop_event=stop_event, max_steps=args.max_steps,
            auth_token=token, tls=tls, max_backoff_s=args.max_backoff_s,
            timeout_s=args.timeout_s, logdir=args.logdir, groups=args.groups, cpu=args.cpu,
        )
    except (InferenceRejectedError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    logger.info("Runner done: %s", stats)
    return 0


if __name__ == "__main__":
    exit_code = main()
    # Leave without the interpreter's finalization: it stops gRPC's daemon threads wherever
    # they are, one may hold a call's lock, and a call collected after that blocks forever
    # in its `__del__` (a rejected runner once hung at exit so in CI). Everything the runner
    # writes is closed by now; the two streams are flushed here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
