"""Continuous actions through the inference server, in process and over gRPC (wire v2).

A tiny dm_env environment with a float32 BoundedArray action checks every action it
gets (a float32 row of shape (2,), finite, within bounds); a numpy policy answers
tanh(observation[:2]). The runner side is the real one (`EnvRunner`, `RemoteRunner`).
"""

from __future__ import annotations

import dm_env
import grpc
import numpy as np
import pytest
import reverb
from dm_env import specs

from seed_agents.core import Policy
from seed_agents.inference import wire
from seed_agents.inference.grpc_client import RemoteInference
from seed_agents.inference.grpc_service import InferenceService
from seed_agents.inference.protocol import FIRST, StepBatch
from seed_agents.inference.runner import EnvRunner
from seed_agents.inference.runner_process import InferenceRejectedError, RemoteRunner
from seed_agents.inference.server import InferenceConfig, InferenceServer
from seed_agents.replay import UnrollAdder, UnrollWriter, queue_table, row_spec, unroll_signature
from seed_agents.replay import unrolls as u
from seed_agents.specs import make_environment_spec
from tests.test_inference_server import SPEC as DISCRETE_SPEC

T = 3
EPISODE = 5


class PointEnv(dm_env.Environment):
    """Observation float32 (3,); action float32 (2,) in [-1, 1]; episodes of 5 steps,
    reset by the step after LAST (dm_env's convention, as `EnvRunner` expects)."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)
        self._t = 0
        self.actions: list[np.ndarray] = []

    def observation_spec(self):
        return specs.Array((3,), np.float32)

    def action_spec(self):
        return specs.BoundedArray((2,), np.float32, -1.0, 1.0)

    def reset(self):
        self._t = 0
        return dm_env.restart(self._obs())

    def step(self, action):
        if self._t == EPISODE:  # dm_env's auto-reset: the action after LAST is ignored
            return self.reset()
        action = np.asarray(action)
        assert action.dtype == np.float32 and action.shape == (2,), (action.dtype, action.shape)
        assert np.all(np.abs(action) <= 1.0), action
        self.actions.append(action.copy())
        self._t += 1
        if self._t == EPISODE:
            return dm_env.termination(float(action.sum()), self._obs())
        return dm_env.transition(float(action.sum()), self._obs())

    def _obs(self):
        return self._rng.uniform(-2, 2, 3).astype(np.float32)


class TanhPolicy(Policy):
    """Acts tanh(observation[:, :2]): deterministic, in [-1, 1], easy to check."""

    extras_spec: dict = {}
    state_spec = ()

    def initial_state(self, batch_size):
        return ()

    def step(self, observation, prev_action, state, env_ids=None):
        assert prev_action.dtype == np.float32 and prev_action.shape[1:] == (2,)
        return np.tanh(observation[:, :2]).astype(np.float32), {}, ()


SPEC = make_environment_spec(PointEnv())


class Served:
    def __init__(self, with_replay=False, **service):
        self.replay = self.writer = None
        adder = None
        if with_replay:
            signature = unroll_signature(SPEC, T, {})
            self.replay = reverb.Server([queue_table("q", 1000, signature)], port=None)
            self.writer = UnrollWriter(self.replay.localhost_client(), "q")
            adder = UnrollAdder(self.writer, 16, T, row_spec(SPEC, {}))
        self.server = InferenceServer(TanhPolicy(), SPEC, adder,
                                      InferenceConfig(max_envs=16, max_batch_size=16))
        self.service = InferenceService(self.server, SPEC, **service)
        self.address = self.service.start()

    def close(self):
        self.service.stop(grace_s=0.2)
        self.server.close()
        if self.replay is not None:
            self.writer.close()  # before its server stops
            self.replay.stop()


@pytest.fixture
def served():
    s = Served(with_replay=True)
    yield s
    s.close()


def test_direct_transport_answers_float_rows():
    server = InferenceServer(TanhPolicy(), SPEC, None, InferenceConfig(max_envs=4))
    try:
        runner = EnvRunner(PointEnv, 2)
        server.connect("direct", 2)
        sent = []

        def infer(batch):
            sent.append(batch)
            return server.step("direct", batch)

        runner.run(infer, max_steps=2 * EPISODE)
        for env in runner.envs:
            assert len(env.actions) == 2 * EPISODE - 1  # each LAST's answer is a reset
        actions = server.step("direct", sent[-1])
        assert actions.dtype == np.float32 and actions.shape == (2, 2)
    finally:
        server.close()


def test_runner_streams_continuous_actions_and_unrolls_reach_replay(served):
    runner = RemoteRunner(served.address, PointEnv, 2, runner_id="point")
    try:
        assert runner.hello.action_dtype == np.float32 and runner.hello.action_shape == (2,)
        assert runner.hello.num_actions == 0
        runner.run(max_steps=3 * T + 1)
        for env in runner.runner.envs:  # every action the env saw was the policy's row
            assert len(env.actions) >= 3 * T - 1
    finally:
        runner.close()
    served.writer.flush()
    client = served.replay.localhost_client()
    size = client.server_info()["q"].current_size
    assert size >= 2 * 2
    items = [s.data for s in client.sample("q", num_samples=size, emit_timesteps=False,
                                           unpack_as_table_signature=True)]
    for item in items:
        action, obs = item[u.ACTION], item[u.OBSERVATION]
        assert action.shape == (T + 1, 2) and action.dtype == np.float32
        np.testing.assert_allclose(action, np.tanh(obs[:, :2]), rtol=1e-6)
        first = item[u.STEP_TYPE][1:] == FIRST
        np.testing.assert_array_equal(item[u.PREV_ACTION][1:][~first], action[:-1][~first])
        assert not item[u.PREV_ACTION][1:][first].any()  # zero at FIRST


def test_action_spec_mismatches_are_refused_at_hello_naming_both(served):
    obs = specs.Array((3,), np.float32)
    cases = {
        "discrete runner": (wire.hello_from_specs("a", "run", 1, obs, specs.DiscreteArray(4)),
                            "expects discrete actions (int32, 4 actions), this server serves "
                            "continuous actions (float32 of shape (2,))"),
        "wrong d": (wire.hello_from_specs("b", "run", 1, obs,
                                          specs.BoundedArray((3,), np.float32, -1, 1)),
                    "expects continuous actions (float32 of shape (3,)), this server serves "
                    "continuous actions (float32 of shape (2,))"),
    }
    for name, (hello, problem) in cases.items():
        with RemoteInference(served.address, hello) as infer:
            with pytest.raises(grpc.RpcError) as error:
                infer(StepBatch(np.zeros((1, 3), np.float32), np.zeros(1, np.float32),
                                np.ones(1, np.float32), np.zeros(1, np.uint8)))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert problem in error.value.details(), (name, error.value.details())


def test_a_continuous_runner_is_refused_by_a_discrete_server():
    server = InferenceServer(TanhPolicy(), DISCRETE_SPEC, None, InferenceConfig(max_envs=4))
    service = InferenceService(server, DISCRETE_SPEC)
    try:
        address = service.start()
        runner = RemoteRunner(address, lambda seed: _PointEnv2(seed), 1)
        with pytest.raises(InferenceRejectedError, match="INVALID_ARGUMENT.*expects continuous"
                                                         ".*serves discrete"):
            runner.run(max_steps=1)
        runner.close()
    finally:
        service.stop(grace_s=0.2)
        server.close()


class _PointEnv2(PointEnv):
    """PointEnv with DISCRETE_SPEC's observation shape (2,), so only the actions differ."""

    def observation_spec(self):
        return specs.Array((2,), np.float32)

    def _obs(self):
        return np.zeros(2, np.float32)


def test_non_finite_continuous_actions_never_reach_the_runner():
    class NaNPolicy(TanhPolicy):
        def step(self, observation, prev_action, state, env_ids=None):
            return np.full((len(observation), 2), np.nan, np.float32), {}, ()

    server = InferenceServer(NaNPolicy(), SPEC, None, InferenceConfig(max_envs=4))
    service = InferenceService(server, SPEC)
    try:
        address = service.start()
        hello = wire.hello_from_specs("nan", "run", 1, SPEC.observations, SPEC.actions)
        with RemoteInference(address, hello) as infer:
            with pytest.raises(grpc.RpcError) as error:
                infer(StepBatch(np.zeros((1, 3), np.float32), np.zeros(1, np.float32),
                                np.ones(1, np.float32), np.full(1, FIRST, np.uint8)))
        # The server's own bug (a NaN action) is an internal error, never sent as actions.
        assert error.value.code() == grpc.StatusCode.INTERNAL
    finally:
        service.stop(grace_s=0.2)
        server.close()

