"""Tests for the environment adapters, the fake environment and the id registry."""

from __future__ import annotations

import functools
import pickle
import time

import dm_env
import gymnasium
import numpy as np
import pytest
from dm_env import specs

from seed_agents.envs import (
    FakeEnvironment,
    GymToDmEnv,
    environment_factory,
    make_environment,
    register,
    registry,
)
from seed_agents.envs.canonical import CanonicalFactory
from seed_agents.specs import make_environment_spec


class _LastObservation(gymnasium.Wrapper):
    """Remembers the observation gym returned last, to compare with what the adapter gives."""

    def reset(self, **kwargs):
        self.last, info = self.env.reset(**kwargs)
        return self.last, info

    def step(self, action):
        self.last, *rest = self.env.step(action)
        return (self.last, *rest)


class _ShiftedActions(gymnasium.Env):
    """A one-step env whose Discrete action space starts at -1; it echoes the action."""

    observation_space = gymnasium.spaces.Box(-5.0, 5.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.full(1, action, np.float32), 0.0, True, False, {}


def _run_episode(env: dm_env.Environment, action=0) -> list[dm_env.TimeStep]:
    timesteps = [env.reset()]
    while not timesteps[-1].last():
        timesteps.append(env.step(action))
    return timesteps


# --- GymToDmEnv ----------------------------------------------------------------------------


def test_gym_termination_has_discount_zero():
    env = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=0)
    timesteps = _run_episode(env, action=0)  # Always pushing left drops the pole quickly.
    assert len(timesteps) < 100
    last = timesteps[-1]
    assert last.step_type == dm_env.StepType.LAST
    assert last.discount == 0.0 and last.discount.dtype == np.float32
    assert last.reward.dtype == np.float32
    assert all(ts.discount == 1.0 for ts in timesteps[1:-1])


def test_gym_truncation_has_discount_one_and_keeps_last_observation():
    gym_env = _LastObservation(gymnasium.make("CartPole-v1", max_episode_steps=5))
    env = GymToDmEnv(gym_env, seed=0)
    timesteps = [env.reset()]
    for t in range(5):  # Alternating actions keeps the pole up for 5 steps.
        timesteps.append(env.step(t % 2))
    assert [ts.step_type for ts in timesteps] == (
        [dm_env.StepType.FIRST] + [dm_env.StepType.MID] * 4 + [dm_env.StepType.LAST]
    )
    last = timesteps[-1]
    assert last.discount == 1.0 and last.discount.dtype == np.float32
    assert last.reward == 1.0
    # The very array gym returned: kept, and not copied since it is already float32.
    assert last.observation is gym_env.last


def test_gym_auto_resets_before_first_reset_and_after_last():
    env = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=0)
    assert env.step(1).first()
    _run_episode(env)
    assert env.step(1).first()
    assert env.step(1).mid()


@pytest.mark.parametrize(
    "action", [1, np.int32(1), np.int64(1), np.array(1), np.array(1, np.int32)]
)
def test_gym_accepts_integer_like_actions(action):
    env = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=0)
    env.reset()
    assert env.step(action).mid()


def test_gym_shifts_actions_of_discrete_with_start():
    env = GymToDmEnv(_ShiftedActions())
    assert env.action_spec().num_values == 3
    env.reset()
    assert env.step(0).observation[0] == -1.0


def test_gym_specs():
    gym_env = gymnasium.make("CartPole-v1")
    env = GymToDmEnv(gym_env, seed=0)
    obs_spec = env.observation_spec()
    assert isinstance(obs_spec, specs.BoundedArray)
    assert obs_spec.shape == (4,) and obs_spec.dtype == np.float32
    np.testing.assert_array_equal(obs_spec.minimum, gym_env.observation_space.low)
    np.testing.assert_array_equal(obs_spec.maximum, gym_env.observation_space.high)
    action_spec = env.action_spec()
    assert isinstance(action_spec, specs.DiscreteArray)
    assert action_spec.num_values == 2 and action_spec.dtype == np.int32
    assert env.reward_spec() == specs.Array((), np.float32)
    discount_spec = env.discount_spec()
    assert discount_spec.dtype == np.float32
    assert (discount_spec.minimum, discount_spec.maximum) == (0.0, 1.0)
    assert make_environment_spec(env).num_actions == 2

    timestep = env.step(0)
    obs_spec.validate(timestep.observation)
    timestep = env.step(0)
    env.reward_spec().validate(timestep.reward)
    discount_spec.validate(timestep.discount)
    env.close()


class _GridActions(_ShiftedActions):
    """Actions on a 2-D grid: neither Discrete nor a 1-D float Box."""

    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


def test_gym_rejects_unsupported_spaces():
    with pytest.raises(TypeError, match="Discrete"):
        GymToDmEnv(gymnasium.make("FrozenLake-v1"))  # Discrete observations.
    with pytest.raises(TypeError, match="1-D float Box"):
        GymToDmEnv(_GridActions())



def test_gym_seeding_is_deterministic():
    a = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=7)
    b = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=7)
    c = GymToDmEnv(gymnasium.make("CartPole-v1"), seed=8)
    first_a, first_b = a.reset().observation, b.reset().observation
    np.testing.assert_array_equal(first_a, first_b)
    assert not np.array_equal(first_a, c.reset().observation)
    # Later resets are not reseeded (episodes differ) but stay reproducible.
    second_a, second_b = a.reset().observation, b.reset().observation
    np.testing.assert_array_equal(second_a, second_b)
    assert not np.array_equal(first_a, second_a)


# --- FakeEnvironment -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, dtype", [((4,), np.float32), ((84, 84, 4), np.uint8), ((), np.float64)]
)
def test_fake_shapes_and_dtypes(shape, dtype):
    env = FakeEnvironment(observation_shape=shape, observation_dtype=dtype, seed=0)
    spec = make_environment_spec(env)
    assert spec.observations.shape == shape and spec.observations.dtype == dtype
    assert spec.actions == specs.DiscreteArray(2, dtype=np.int32)
    assert spec.rewards.dtype == np.float32 and spec.discounts.dtype == np.float32
    for timestep in _run_episode(env)[:5]:
        spec.observations.validate(timestep.observation)
    timestep = env.step(0)
    timestep = env.step(0)
    spec.rewards.validate(timestep.reward)
    spec.discounts.validate(timestep.discount)


@pytest.mark.parametrize("terminate, final_discount", [(False, 1.0), (True, 0.0)])
def test_fake_episode_length_and_ending(terminate, final_discount):
    env = FakeEnvironment(episode_length=7, terminate=terminate, seed=0)
    for _ in range(2):  # The second episode comes from auto-reset after LAST.
        timesteps = [env.step(0)]
        assert timesteps[0].first()
        while not timesteps[-1].last():
            timesteps.append(env.step(0))
        assert len(timesteps) == 8  # FIRST + 7 steps.
        assert all(ts.discount == 1.0 for ts in timesteps[1:-1])
        assert timesteps[-1].discount == final_discount
        assert timesteps[-1].discount.dtype == np.float32


def test_fake_step_cost_burns_time():
    env = FakeEnvironment(step_cost_us=200.0, episode_length=1000)
    env.reset()
    start = time.perf_counter()
    for _ in range(50):
        env.step(0)
    assert time.perf_counter() - start >= 0.010


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
@pytest.mark.parametrize("num_actions", [2, 3])
def test_fake_reward_is_learnable(dtype, num_actions):
    env = FakeEnvironment(observation_dtype=dtype, num_actions=num_actions, seed=1)
    timestep = env.reset()
    rewards_right, rewards_wrong, labels = [], [], set()
    for _ in range(200):
        label = env.label(timestep.observation)
        labels.add(label)
        if len(rewards_right) % 2:
            timestep = env.step(label)
            rewards_right.append(timestep.reward)
        else:
            timestep = env.step((label + 1) % num_actions)
            rewards_wrong.append(timestep.reward)
        if timestep.last():
            timestep = env.reset()
    assert all(r == 1.0 for r in rewards_right) and all(r == 0.0 for r in rewards_wrong)
    assert labels == set(range(num_actions))  # Every action is sometimes the right one.


def test_fake_float_label_is_sign_with_two_actions():
    env = FakeEnvironment(num_actions=2)
    assert env.label(np.array([-0.3, 0.9], np.float32)) == 0
    assert env.label(np.array([0.3, -0.9], np.float32)) == 1


def test_fake_seeding_and_read_only_observations():
    def stream(seed):
        env = FakeEnvironment(seed=seed, episode_length=5)
        return [env.step(0).observation for _ in range(20)]

    a, b, c = stream(3), stream(3), stream(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    with pytest.raises(ValueError):
        a[0][0] = 1.0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"observation_shape": (0, 3)}, "observation_shape"),
        ({"observation_shape": (2.5,)}, "observation_shape"),
        ({"observation_dtype": np.int16}, "observation_dtype"),
        ({"observation_dtype": "nonsense"}, "observation_dtype"),
        ({"observation_dtype": None}, "observation_dtype"),
        ({"num_actions": 0}, "num_actions"),
        ({"episode_length": 0}, "episode_length"),
        ({"episode_length": True}, "episode_length"),
        ({"step_cost_us": -1.0}, "step_cost_us"),
        ({"step_cost_us": float("nan")}, "step_cost_us"),
        ({"terminate": 1}, "terminate"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_fake_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FakeEnvironment(**kwargs)


def test_fake_rejects_out_of_range_actions():
    env = FakeEnvironment(num_actions=2)
    env.reset()
    with pytest.raises(ValueError, match="outside"):
        env.step(2)


# --- registry ------------------------------------------------------------------------------


@pytest.fixture
def isolated_registry(monkeypatch):
    """Lets a test register prefixes without leaking them into other tests."""
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))


def test_registry_builds_gym_with_its_time_limit():
    env = make_environment("gym:CartPole-v1", seed=0)
    assert isinstance(env, GymToDmEnv)
    assert env.gym_env.spec.max_episode_steps == 500
    assert env.reset().first()


def test_registry_builds_fake_with_options():
    assert isinstance(make_environment("fake"), FakeEnvironment)
    env = make_environment("fake:obs=84x84x4,dtype=uint8,actions=6,len=3,terminate=true", seed=1)
    spec = make_environment_spec(env)
    assert spec.observations.shape == (84, 84, 4) and spec.observations.dtype == np.uint8
    assert spec.num_actions == 6
    timesteps = _run_episode(env)
    assert len(timesteps) == 4 and timesteps[-1].discount == 0.0
    env = make_environment("fake:obs=4,dtype=float32,cost_us=1.5,terminate=0")
    assert _run_episode(env)[-1].discount == 1.0


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("fake:foo=1", r"'foo=1'.*valid keys: obs, dtype, actions, len, cost_us, terminate"),
        ("fake:len", r"'len'.*valid keys"),
        ("fake:actions=abc", r"'actions=abc'"),
        ("fake:actions=0", r"'actions=0'.*num_actions"),
        ("fake:dtype=int16", r"'dtype=int16'.*float32"),
        ("fake:terminate=maybe", r"'terminate=maybe'.*true"),
        ("fake:obs=0x3", r"'obs=0x3'"),
        ("fake:len=2,len=3", r"'len' given twice"),
        ("nope:x", r"'nope'.*known prefixes: atari, dmc, fake, gym, mask"),
        ("CartPole-v1", r"Did you mean 'gym:CartPole-v1'"),
        ("gym:", r"needs a gymnasium id"),
        ("gym:NoSuchEnv-v0", r"gym:NoSuchEnv-v0"),
    ],
)
def test_registry_rejects_bad_ids_eagerly(env_id, message):
    with pytest.raises(ValueError, match=message):
        environment_factory(env_id)
    with pytest.raises(ValueError, match=message):
        make_environment(env_id)


def test_registry_custom_prefix(isolated_registry):
    def make_short_fake(rest, seed):
        return FakeEnvironment(episode_length=int(rest), seed=seed)

    register("short:", make_short_fake)
    assert len(_run_episode(make_environment("short:2"))) == 3
    with pytest.raises(ValueError, match="already registered"):
        register("short", make_short_fake)
    with pytest.raises(ValueError, match="already registered"):
        register("fake", make_short_fake)
    register("short", lambda rest, seed: FakeEnvironment(episode_length=1), overwrite=True)
    assert len(_run_episode(make_environment("short:2"))) == 2
    with pytest.raises(ValueError, match="non-empty"):
        register(":", make_short_fake)


def test_registry_custom_prefix_validation_runs_at_factory_creation(isolated_registry):
    def validate(rest):
        if not rest.isdigit():
            raise ValueError(f"expected a number, got {rest!r}")

    register(
        "short", lambda rest, seed: FakeEnvironment(episode_length=int(rest)), validate=validate
    )
    with pytest.raises(ValueError, match="expected a number"):
        environment_factory("short:x")
    assert environment_factory("short:3")(0) is not None


@pytest.mark.parametrize("env_id", ["fake:len=3,obs=2x2", "gym:CartPole-v1"])
def test_id_factory_pickles(env_id):
    factory = environment_factory(env_id)
    restored = pickle.loads(pickle.dumps(factory))
    assert restored == factory
    first = restored(5).reset().observation
    np.testing.assert_array_equal(first, factory(5).reset().observation)


class _Counter(dm_env.Environment):
    """A user environment the package knows nothing about."""

    def __init__(self, seed: int):
        self._t = seed

    def reset(self):
        return dm_env.restart(np.array(self._t, np.int64))

    def step(self, action):
        self._t += 1
        return dm_env.transition(np.float32(1.0), np.array(self._t, np.int64))

    def observation_spec(self):
        return specs.Array((), np.int64)

    def action_spec(self):
        return specs.DiscreteArray(1, dtype=np.int32)


def test_user_callable_reaches_environment_factory_converted_at_the_edge():
    factory = environment_factory(_Counter)
    assert isinstance(factory, CanonicalFactory) and factory.factory is _Counter
    assert environment_factory(factory) is factory  # not wrapped twice
    env = factory(10)
    first = env.reset().observation
    assert first.dtype == np.float32 and first == 10.0  # int64 observations become float32
    assert make_environment_spec(env).num_actions == 1
    partial = functools.partial(make_environment, "fake:len=4")
    restored = pickle.loads(pickle.dumps(environment_factory(partial)))
    assert (restored.factory.func, restored.factory.args) == (make_environment, ("fake:len=4",))
    assert len(_run_episode(restored(0))) == 5
    with pytest.raises(TypeError, match="callable"):
        environment_factory(42)


def test_random_play_returns_the_mean_of_whole_random_episodes():
    from seed_agents.envs.random_play import random_return

    # CartPole pays 1 per step: random play lasts about 20 steps, never near 500.
    assert 10 < random_return("gym:CartPole-v1", 20, seed=0) < 60
    assert random_return("gym:CartPole-v1", 5, seed=3) == random_return("gym:CartPole-v1", 5,
                                                                        seed=3)
    # Continuous actions in the spec's bounds: Pendulum's costs are negative, 200 steps.
    assert -2000 < random_return("gym:Pendulum-v1", 2, seed=0) < 0
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        random_return("gym:CartPole-v1", 0, seed=0)
