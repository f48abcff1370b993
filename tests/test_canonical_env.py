"""A user's environment as it is: int64 ids, float64 actions and observations, at the edge."""

from __future__ import annotations

import pickle

import dm_env
import numpy as np
import pytest
from dm_env import specs

from seed_agents.envs import canonical_environment, environment_factory
from seed_agents.envs.canonical import AutoReset, Float32Values, Int32Actions
from seed_agents.specs import make_environment_spec


class RecordingEnv(dm_env.Environment):
    """Declares the given specs, returns observations of the spec's dtype and python-float
    rewards (dm_env's idiom), and records every action it is sent."""

    def __init__(self, actions: specs.Array, observations: specs.Array | dict,
                 length: int = 3, value_dtype: type = np.float64):
        self._actions, self._observations, self._length = actions, observations, length
        self._value_dtype = value_dtype  # of rewards and discounts (dm_env's default: float)
        self.sent: list = []

    def _observation(self):
        spec = self._observations
        return np.full(spec.shape, len(self.sent), spec.dtype)

    def reset(self):
        self.sent = []
        return dm_env.restart(self._observation())

    def step(self, action):
        self.sent.append(action)
        if len(self.sent) == self._length:
            return dm_env.termination(1.5, self._observation())
        return dm_env.transition(0.5, self._observation())

    def observation_spec(self):
        return self._observations

    def action_spec(self):
        return self._actions

    def reward_spec(self):
        return specs.Array((), self._value_dtype, name="reward")

    def discount_spec(self):
        return specs.BoundedArray((), self._value_dtype, 0.0, 1.0, name="discount")


def int64_ids(seed: int = 0) -> RecordingEnv:
    """`DiscreteArray(dtype=int)`: the common idiom, int64."""
    return RecordingEnv(specs.DiscreteArray(3, dtype=np.int64),
                        specs.Array((2,), np.float64))


def float64_vector(seed: int = 0) -> RecordingEnv:
    """dm_control's declaration: float64 actions within [-2, 4], float64 observations."""
    return RecordingEnv(specs.BoundedArray((2,), np.float64, -2.0, 4.0),
                        specs.Array((3,), np.float64))


def test_int64_discrete_actions_are_int32_ids_sent_back_in_the_env_dtype():
    inner = int64_ids()
    env = canonical_environment(inner)
    spec = make_environment_spec(env)  # refused before the edge existed
    assert spec.actions == specs.DiscreteArray(3, dtype=np.int32, name="action")
    env.reset()
    env.step(np.int32(2))
    assert inner.sent == [2] and type(inner.sent[0]) is np.int64


def test_float64_action_vectors_are_float32_in_minus_one_one_scaled_to_the_env_bounds():
    inner = float64_vector()
    env = canonical_environment(inner)
    spec = make_environment_spec(env)
    assert spec.actions.dtype == np.float32 and spec.action_size == 2
    np.testing.assert_array_equal(spec.actions.minimum, [-1.0, -1.0])
    env.reset()
    env.step(np.array([-1.0, 1.0], np.float32))
    np.testing.assert_array_equal(inner.sent[0], [-2.0, 4.0])
    assert inner.sent[0].dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int64, np.int16, np.uint16])
def test_other_numeric_observations_become_float32_in_spec_and_steps(dtype):
    env = canonical_environment(RecordingEnv(specs.DiscreteArray(2, dtype=np.int32),
                                             specs.Array((2,), dtype)))
    assert env.observation_spec().dtype == np.float32
    timesteps = [env.reset(), env.step(0), env.step(1), env.step(0)]
    assert timesteps[-1].last()
    for t, timestep in enumerate(timesteps):
        assert timestep.observation.dtype == np.float32
        np.testing.assert_array_equal(timestep.observation, [t, t])
    for timestep in timesteps[1:]:
        assert type(timestep.reward) is np.float32 and type(timestep.discount) is np.float32
    assert env.reward_spec().dtype == np.float32 == env.discount_spec().dtype


def test_bounded_float64_observations_keep_their_bounds_as_float32():
    env = canonical_environment(RecordingEnv(
        specs.DiscreteArray(2, dtype=np.int32),
        specs.BoundedArray((2,), np.float64, -1e300, 3.0)))
    spec = env.observation_spec()
    assert spec.dtype == np.float32 and isinstance(spec, specs.BoundedArray)
    assert np.all(spec.minimum == -np.inf) and np.all(spec.maximum == 3.0)


@pytest.mark.parametrize("dtype", [np.uint8, bool, np.float32])
def test_an_environment_already_in_the_toolkit_dtypes_is_not_wrapped(dtype):
    inner = RecordingEnv(specs.DiscreteArray(2, dtype=np.int32), specs.Array((4,), dtype),
                         value_dtype=np.float32)
    assert canonical_environment(inner) is inner
    assert canonical_environment(RecordingEnv(inner.action_spec(), specs.Array((4,), dtype)))\
        is not inner  # float64 rewards alone are converted


def test_what_cannot_be_converted_is_refused_with_the_spec_named():
    nested = RecordingEnv(specs.DiscreteArray(2, dtype=np.int32),
                          {"a": specs.Array((2,), np.float32)})
    with pytest.raises(ValueError, match="one numeric array"):
        canonical_environment(nested)
    strings = RecordingEnv(specs.DiscreteArray(2, dtype=np.int32), specs.Array((), np.str_))
    with pytest.raises(ValueError, match="numeric"):
        canonical_environment(strings)
    unbounded = canonical_environment(RecordingEnv(specs.Array((2,), np.float64),
                                                   specs.Array((2,), np.float32)))
    with pytest.raises(ValueError, match="neither a DiscreteArray nor a BoundedArray"):
        make_environment_spec(unbounded)
    with pytest.raises(ValueError, match="integer DiscreteArray"):
        Int32Actions(RecordingEnv(specs.DiscreteArray(2**31, dtype=np.int64),
                                  specs.Array((2,), np.float32)))
    assert isinstance(canonical_environment(int64_ids()), Float32Values)


def test_an_environment_that_does_not_reset_itself_is_reset_after_its_last_step():
    inner = RecordingEnv(specs.DiscreteArray(2, dtype=np.int32), specs.Array((1,), np.float32),
                         length=2)  # stepping past LAST would count on: 3, 4, ...
    env = AutoReset(inner)
    steps = [env.reset(), env.step(1), env.step(1), env.step(0), env.step(1), env.step(1)]
    assert [t.step_type for t in steps] == [dm_env.StepType.FIRST, dm_env.StepType.MID,
                                             dm_env.StepType.LAST] * 2
    assert inner.sent == [1, 1]  # the action after LAST starts the episode, unsent
    factory = environment_factory(lambda seed: inner)
    assert isinstance(factory(0).environment, AutoReset)  # under Float32Values


def test_a_factory_of_such_environments_pickles_to_other_processes():
    factory = pickle.loads(pickle.dumps(environment_factory(float64_vector)))
    spec = make_environment_spec(factory(0))
    assert spec.observations.dtype == np.float32 and spec.actions.dtype == np.float32


@pytest.mark.parametrize("env_id", ["fake:obs=2x2,dtype=uint8", "gym:CartPole-v1",
                                    "gym:Pendulum-v1", "atari:Pong", "dmc:cartpole-balance"])
def test_built_in_ids_are_already_in_the_toolkit_dtypes(env_id):
    """No id pays a conversion per step: the edge wraps only what needs it."""
    from seed_agents.envs import make_environment

    env = make_environment(env_id, 0)
    layers, inner = [], env
    while inner is not None:
        layers.append(type(inner))
        inner = inner.__dict__.get("_environment")
    env.close()
    assert Float32Values not in layers and Int32Actions not in layers, layers
