"""Frames stacked by the inference server: the same observations as the environment's own.

Runners of single-frame Atari environments (`stack=1`) send a quarter of the bytes; the
server keeps each environment's stack (`FrameStacks`). Whatever the slots' layout, the
policy must see exactly what a runner of stacking environments would have sent: checked
against a reference stacker, then end to end over gRPC with real Pong, where the policy's
actions depend on what it sees, so that any frame out of place changes the game.
"""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from builders.vtrace import VTraceBuilder
from launch.experiment import Experiment
from seed_agents.core import Policy
from seed_agents.envs import make_environment
from seed_agents.envs.registry import split_frame_stack
from seed_agents.inference import wire
from seed_agents.inference.frame_stacks import FrameStacks, frame_shape
from seed_agents.inference.grpc_client import RemoteInference
from seed_agents.inference.grpc_service import InferenceService
from seed_agents.inference.protocol import StepBatch
from seed_agents.inference.runner_process import RemoteRunner
from seed_agents.inference.server import InferenceConfig, InferenceServer
from seed_agents.specs import make_environment_spec


def _reference_push(stacks: np.ndarray, slots, frames, first) -> None:
    for j, slot in enumerate(slots):
        if first[j]:
            stacks[slot] = np.concatenate([frames[j]] * (stacks.shape[-1] // frames.shape[-1]),
                                          axis=-1)
        else:
            stacks[slot] = np.concatenate([stacks[slot][..., frames.shape[-1]:], frames[j]],
                                          axis=-1)


@pytest.mark.parametrize("dtype,frame_channels,depth", [(np.uint8, 1, 4), (np.float32, 2, 3)])
def test_pushes_match_a_reference_for_any_slots(dtype, frame_channels, depth):
    rng = np.random.default_rng(0)
    stacked = (5, 3, frame_channels * depth)
    stacks = FrameStacks(12, stacked, dtype, depth)
    reference = np.zeros((12, *stacked), dtype)
    layouts = [np.arange(2, 7), np.array([11, 0, 5]), np.array([8]), np.arange(0, 12)]
    for t in range(40):
        slots = layouts[t % len(layouts)]
        frames = rng.integers(0, 200, (len(slots), 5, 3, frame_channels)).astype(dtype)
        first = rng.random(len(slots)) < 0.25
        out = stacks.push(slots, frames, first)
        _reference_push(reference, slots, frames, first)
        np.testing.assert_array_equal(out, reference[slots])
    # A contiguous run is served from the storage itself: no copy.
    out = stacks.push(np.arange(3, 6), np.zeros((3, 5, 3, frame_channels), dtype),
                      np.zeros(3, bool))
    assert np.shares_memory(out, stacks._stacks)
    stacks.clear(np.arange(3, 6))
    assert not stacks.push(np.arange(3, 6), np.zeros((3, 5, 3, frame_channels), dtype),
                           np.zeros(3, bool)).any()


def test_frame_shapes_and_ids_that_split():
    assert frame_shape((84, 84, 4), 4) == (84, 84, 1)
    with pytest.raises(ValueError, match="not a stack of 3 frames"):
        frame_shape((84, 84, 4), 3)
    with pytest.raises(ValueError, match=">= 1"):
        InferenceConfig(frame_stack=0)
    assert split_frame_stack("atari:Pong") == ("atari:Pong,stack=1", 4)
    assert split_frame_stack("atari:Pong, stack=2 ,sticky=0") == (
        "atari:Pong,sticky=0,stack=1", 2)
    assert split_frame_stack("atari:Pong,stack=1") == ("atari:Pong,stack=1", 1)
    assert split_frame_stack("gym:CartPole-v1") == ("gym:CartPole-v1", 1)
    with pytest.raises(ValueError, match="given twice"):
        split_frame_stack("atari:Pong,stack=2,stack=3")


def test_the_experiment_says_where_frames_are_stacked():
    builder = VTraceBuilder()
    pong = Experiment(builder, "atari:Pong,sticky=0")
    assert (pong.runner_environment, pong.server_frame_stack) == (
        "atari:Pong,sticky=0,stack=1", 4)
    by_runner = Experiment(builder, "atari:Pong", frame_stacking="runner")
    assert (by_runner.runner_environment, by_runner.server_frame_stack) == ("atari:Pong", 1)
    local = Experiment(builder, "atari:Pong", inference="local", envs_per_runner=1)
    assert local.server_frame_stack == 1
    cartpole = Experiment(builder, "gym:CartPole-v1")
    assert (cartpole.runner_environment, cartpole.server_frame_stack) == ("gym:CartPole-v1", 1)
    with pytest.raises(ValueError, match="frame_stacking='server' needs"):
        Experiment(builder, "gym:CartPole-v1", frame_stacking="server")
    with pytest.raises(ValueError, match="frame_stacking must be"):
        Experiment(builder, "atari:Pong", frame_stacking="learner")


class _SeeingPolicy(Policy):
    """Acts on what it sees (a hash of each observation), and keeps every observation per
    slot: any frame out of place changes the actions, and so the game, from there on."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions
        self.extras_spec = {}
        self.state_spec = ()
        self.seen: dict[int, list[np.ndarray]] = {}

    def initial_state(self, batch_size: int):
        return ()

    def step(self, observation, prev_action, state, env_ids=None):
        for slot, obs in zip(env_ids, observation, strict=True):
            self.seen.setdefault(int(slot), []).append(np.array(obs))
        flat = observation.reshape(len(observation), -1).astype(np.int64)
        action = (flat[:, ::97].sum(axis=1) * 31 + flat[:, -1]) % self.num_actions
        return action.astype(np.int32), {}, ()


NUM_ENVS = 3
ROUNDS = 45  # Episodes of 30 frames: several restarts (FIRST steps) per environment.
PONG = "atari:Pong,max_frames=30"


def _play_over_grpc(env_id: str, frame_stack: int) -> dict[int, list[np.ndarray]]:
    spec = make_environment_spec(make_environment(PONG))
    policy = _SeeingPolicy(spec.actions.num_values)
    server = InferenceServer(policy, spec, adder=None, config=InferenceConfig(
        max_envs=NUM_ENVS, max_batch_size=NUM_ENVS, frame_stack=frame_stack))
    service = InferenceService(server, spec, max_streams=2)
    service.start()
    try:
        runner = RemoteRunner(service.address, env_id, NUM_ENVS, seed=5, runner_id="r",
                              timeout_s=60)
        try:
            runner.run(max_steps=ROUNDS)
        finally:
            runner.close()
        deadline = time.monotonic() + 60
        while server.num_clients and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        service.stop(grace_s=0.2)
        server.close()
    return policy.seen


def test_pong_stacked_by_the_server_is_pong_stacked_by_the_environment():
    by_environment = _play_over_grpc(PONG, 1)
    single, depth = split_frame_stack(PONG)
    by_server = _play_over_grpc(single, depth)
    assert sorted(by_server) == sorted(by_environment) == list(range(NUM_ENVS))
    for slot in range(NUM_ENVS):
        assert len(by_server[slot]) == len(by_environment[slot]) == ROUNDS
        for t, (ours, theirs) in enumerate(zip(by_server[slot], by_environment[slot],
                                               strict=True)):
            assert ours.shape == (84, 84, 4)
            np.testing.assert_array_equal(ours, theirs, err_msg=f"slot {slot}, step {t}")
    # The frames move: the games are not all one still picture.
    assert any(not np.array_equal(s[0], s[-1]) for s in by_server.values())


def _whole_stacks(k: int) -> StepBatch:
    return StepBatch(np.zeros((k, 84, 84, 4), np.uint8), np.zeros(k, np.float32),
                     np.ones(k, np.float32), np.zeros(k, np.uint8))


def test_a_runner_sending_whole_stacks_to_a_stacking_service_is_told_why():
    spec = make_environment_spec(make_environment(PONG))
    server = InferenceServer(_SeeingPolicy(spec.actions.num_values), spec, adder=None,
                             config=InferenceConfig(max_envs=2, frame_stack=4))
    assert server.client_observation_shape == (84, 84, 1)
    service = InferenceService(server, spec, max_streams=2)
    service.start()
    try:
        hello = wire.Hello("r", "run", 2, (84, 84, 4), np.uint8, spec.actions.num_values)
        client = RemoteInference(service.address, hello, timeout_s=30)
        try:
            with pytest.raises(grpc.RpcError) as error:
                client(_whole_stacks(2))
        finally:
            client.close()
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "stacks frames itself" in error.value.details()
        assert "stack=1" in error.value.details()
    finally:
        service.stop(grace_s=0.2)
        server.close()


def test_a_stacking_server_refuses_whole_stacks_in_process():
    spec = make_environment_spec(make_environment(PONG))
    server = InferenceServer(_SeeingPolicy(spec.actions.num_values), spec, adder=None,
                             config=InferenceConfig(max_envs=2, frame_stack=4))
    try:
        server.connect("a", 1)
        with pytest.raises(ValueError, match=r"observation must be uint8\[1, 84, 84, 1\]"):
            server.step("a", _whole_stacks(1))
    finally:
        server.close()
