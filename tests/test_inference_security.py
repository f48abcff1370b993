"""Who may talk to the inference service: a token on by default in every launcher, the
token file and TLS options, and TLS end to end with a self-signed certificate."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import grpc
import pytest

from builders.vtrace import VTraceBuilder
from launch.commands import cli
from launch.experiment import Experiment
from launch.nodes import inference_service, make_program
from seed_agents.inference.grpc_service import InferenceService
from seed_agents.inference.runner_process import InferenceRejectedError, RemoteRunner
from seed_agents.inference.security import TLSConfig, make_token, read_token_file
from tests.test_inference_server import SPEC, Setup
from tests.test_service_defects import FIRST, auth, batch, hello, one_shot

ENV = "fake:obs=2,len=7"


# -- tokens -------------------------------------------------------------------------------


def test_tokens_are_random_and_read_from_a_file(tmp_path):
    tokens = {make_token() for _ in range(20)}
    assert len(tokens) == 20 and all(len(t) >= 40 for t in tokens)
    path = tmp_path / "token"
    path.write_text("  s3cret-token\n")
    assert read_token_file(path) == "s3cret-token"
    for text, problem in (("", "is empty"), ("two words", "more than one word")):
        path.write_text(text)
        with pytest.raises(ValueError, match=problem):
            read_token_file(path)
    with pytest.raises(ValueError, match="Cannot read the inference token file"):
        read_token_file(tmp_path / "missing")


def test_every_experiment_has_its_own_token_kept_out_of_its_repr():
    a, b = Experiment(VTraceBuilder(), ENV), Experiment(VTraceBuilder(), ENV)
    assert a.inference_token and b.inference_token and a.inference_token != b.inference_token
    assert a.inference_token not in repr(a)
    assert dataclasses.replace(a, logdir="x").inference_token == a.inference_token
    assert Experiment(VTraceBuilder(), ENV, inference_token=None).inference_token is None
    with pytest.raises(ValueError, match="inference_token is empty"):
        Experiment(VTraceBuilder(), ENV, inference_token=" ")
    with pytest.raises(ValueError, match="tls needs the service's certificate and key"):
        Experiment(VTraceBuilder(), ENV, tls=TLSConfig(ca="ca.pem"))


def test_the_launchers_service_refuses_streams_without_the_runs_token():
    experiment = Experiment(VTraceBuilder(), ENV, num_runners=3, envs_per_runner=2)
    setup = Setup()
    service = inference_service(experiment, setup.server, SPEC, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(service.start()) as channel:
            messages = [hello(b"runner-0"), batch([FIRST, FIRST])]
            for metadata in (None, auth("guess")):
                _, code, _ = one_shot(channel, messages, metadata)
                assert code == grpc.StatusCode.UNAUTHENTICATED
            replies, code, details = one_shot(channel, messages, auth(experiment.inference_token))
            assert code == grpc.StatusCode.OK and len(replies) == 1, details
            # A stream carries at most envs_per_runner environments.
            _, code, details = one_shot(channel, [hello(b"big", k=3)],
                                        auth(experiment.inference_token))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "=2" in details
    finally:
        service.stop(grace_s=0.2)
        setup.close()


def test_the_program_hands_runners_the_token_and_no_private_key():
    tls = TLSConfig(cert="cert.pem", key="key.pem", ca="ca.pem")
    experiment = Experiment(VTraceBuilder(), ENV, num_runners=2, tls=tls)
    runners = [node for node in make_program(experiment).nodes if node.group == "runner"]
    assert len(runners) == 2
    for node in runners:
        assert node.kwargs["auth_token"] == experiment.inference_token
        assert node.kwargs["tls"] == dataclasses.replace(tls, key=None)


def test_cli_reads_the_token_file_and_tls_options(tmp_path):
    token = tmp_path / "token"
    token.write_text("from-a-file\n")
    args = cli.build_parser().parse_args([
        "train", "--inference-token-file", str(token), "--tls-cert", "c.pem",
        "--tls-key", "k.pem", "--tls-ca", "ca.pem", "--tls-server-name", "learner.internal"])
    experiment = cli.make_experiment(args)
    assert experiment.inference_token == "from-a-file"
    assert experiment.tls == TLSConfig("c.pem", "k.pem", "ca.pem", "learner.internal")
    default = cli.make_experiment(cli.build_parser().parse_args(["train"]))
    assert default.inference_token and default.tls is None
    bad = cli.build_parser().parse_args(
        ["train", "--inference-token-file", str(tmp_path / "missing")])
    assert cli.train(bad) == 2


# -- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for the name runners expect by default."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    name = TLSConfig.server_name
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"),
         "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"],
        check=True, capture_output=True, timeout=300)
    return TLSConfig(cert=str(folder / "cert.pem"), key=str(folder / "key.pem"))


def test_runners_reach_a_tls_service_with_the_token_and_nobody_else(certificate):
    setup = Setup()
    service = InferenceService(setup.server, SPEC, auth_token="t0ken",
                               server_credentials=certificate.server_credentials())
    try:
        address = service.start()
        runner_tls = TLSConfig(ca=certificate.cert)  # what a runner holds: no key
        runner = RemoteRunner(address, ENV, 2, runner_id="tls", auth_token="t0ken",
                              tls=runner_tls)
        runner.run(max_steps=5)
        runner.close()
        assert runner.stats.rounds == 5
        # Plain TCP gets no further than the TLS handshake.
        with grpc.insecure_channel(address) as channel:
            _, code, _ = one_shot(channel, [hello()], auth("t0ken"))
            assert code == grpc.StatusCode.UNAVAILABLE
        # TLS without the token is refused, and not retried.
        stranger = RemoteRunner(address, ENV, 2, runner_id="stranger", tls=runner_tls)
        with pytest.raises(InferenceRejectedError, match="UNAUTHENTICATED"):
            stranger.run(max_steps=1)
        stranger.close()
    finally:
        service.stop(grace_s=0.2)
        setup.close()


def test_tls_config_is_checked():
    with pytest.raises(ValueError, match="needs its certificate"):
        TLSConfig(key="k.pem")
    with pytest.raises(ValueError, match="a certificate .* or a CA"):
        TLSConfig()
    with pytest.raises(ValueError, match="needs a TLS certificate and its key"):
        TLSConfig(ca="ca.pem").server_credentials()
    with pytest.raises(ValueError, match="Cannot read the TLS"):
        TLSConfig(cert="/nonexistent.pem", key="/nonexistent.key").server_credentials()
    assert TLSConfig(ca="ca.pem", server_name=None).channel_options() == ()


def test_runner_process_cli_reads_its_token_from_a_file(tmp_path):
    setup = Setup()
    service = InferenceService(setup.server, SPEC, auth_token="file-t0ken")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        address = service.start()
        codes = {}
        for name, text in (("right", "file-t0ken\n"), ("wrong", "other\n")):
            (tmp_path / name).write_text(text)
            done = subprocess.run(
                [sys.executable, "-m", "seed_agents.inference.runner_process", "--address",
                 address, "--env", ENV, "--num-envs", "2", "--max-steps", "3",
                 "--token-file", str(tmp_path / name)],
                cwd=repo, capture_output=True, text=True, timeout=600)
            codes[name] = (done.returncode, done.stderr)
        assert codes["right"][0] == 0, codes["right"][1]
        assert codes["wrong"][0] == 2 and "UNAUTHENTICATED" in codes["wrong"][1]
    finally:
        service.stop(grace_s=0.2)
        setup.close()


# -- the learner's control service ----------------------------------------------------------


class _Watched:
    """The control service's two callbacks, counting how often each was asked."""

    def __init__(self):
        self.calls = {"status": 0, "variables": 0}

    def status(self) -> dict:
        self.calls["status"] += 1
        return {"learner_steps": 7}

    def variables(self) -> list:
        import numpy as np

        self.calls["variables"] += 1
        return [np.arange(6, dtype=np.float32).reshape(2, 3)]


def _raw_call(channel: grpc.Channel, method: str, metadata=None) -> tuple[bytes | None, object]:
    """A call as any gRPC client could make it, without our client: (answer, code)."""
    call = channel.unary_unary(f"/seed_agents.Control/{method}")
    try:
        return call(b"", timeout=30, metadata=metadata), grpc.StatusCode.OK
    except grpc.RpcError as error:
        return None, error.code()


@pytest.mark.parametrize("tls", [False, True])
def test_control_service_answers_the_runs_token_only(tls, request):
    from launch.control import ControlClient, ControlService

    certificate = request.getfixturevalue("certificate") if tls else None
    watched = _Watched()
    service = ControlService(watched.status, watched.variables, auth_token="t0ken",
                             server_credentials=certificate.server_credentials() if tls
                             else None)
    client_tls = TLSConfig(ca=certificate.cert) if tls else None
    try:
        address = service.start()
        client = ControlClient(address, auth_token="t0ken", tls=client_tls)
        assert client.status() == {"learner_steps": 7}
        assert client.variables()[0].tolist() == [[0, 1, 2], [3, 4, 5]]
        client.close()
        assert watched.calls == {"status": 1, "variables": 1}
        channel = (grpc.secure_channel(address, client_tls.channel_credentials(),
                                       options=client_tls.channel_options())
                   if tls else grpc.insecure_channel(address))
        with channel:
            for metadata in (None, auth("wrong"), (("authorization", "t0ken"),)):
                for method in ("Status", "Variables"):
                    answer, code = _raw_call(channel, method, metadata)
                    assert (answer, code) == (None, grpc.StatusCode.UNAUTHENTICATED)
        # Refused before either was asked: not one byte of the model or the run's state.
        assert watched.calls == {"status": 1, "variables": 1}
        if tls:  # plain TCP, even with the token, gets no further than the handshake
            with grpc.insecure_channel(address) as plain:
                assert _raw_call(plain, "Variables", auth("t0ken"))[1] == \
                    grpc.StatusCode.UNAVAILABLE
    finally:
        service.stop()


def test_the_learners_control_service_takes_the_runs_token():
    from launch.control import ControlClient
    from launch.experiment import client_credentials
    from launch.nodes import control_service

    experiment = Experiment(VTraceBuilder(), ENV)
    credentials = client_credentials(experiment)
    assert credentials == {"auth_token": experiment.inference_token, "tls": None}
    watched = _Watched()
    service = control_service(experiment, watched.status, watched.variables, "127.0.0.1:0")
    try:
        address = service.start()
        assert ControlClient(address, **credentials).status() == {"learner_steps": 7}
        with pytest.raises(grpc.RpcError) as refused:
            ControlClient(address).status()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        service.stop()


def test_control_service_refuses_large_requests_before_reading_them():
    from launch.control import ControlService

    watched = _Watched()
    service = ControlService(watched.status, watched.variables, auth_token="t0ken")
    try:
        address = service.start()
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_unary("/seed_agents.Control/Variables")
            with pytest.raises(grpc.RpcError) as refused:
                call(b"x" * (1 << 20), timeout=30, metadata=auth("t0ken"))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert watched.calls == {"status": 0, "variables": 0}
    finally:
        service.stop()
