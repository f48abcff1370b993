"""Tests for the observation-masking wrapper and its `mask:` ids."""

from __future__ import annotations

import pickle

import dm_env
import numpy as np
import pytest
from dm_env import specs

from seed_agents.envs import FakeEnvironment, environment_factory, make_environment
from seed_agents.envs.masked import MaskedObservation


def _run(env: dm_env.Environment, actions) -> list[dm_env.TimeStep]:
    return [env.step(a) for a in actions]  # Auto-resets before the first step and after LAST.


def test_cartpole_velocities_are_zero_and_positions_untouched():
    actions = np.random.default_rng(0).integers(0, 2, 300)
    masked = _run(make_environment("mask:1,3:gym:CartPole-v1", seed=4), actions)
    plain = _run(make_environment("gym:CartPole-v1", seed=4), actions)
    assert sum(ts.first() for ts in masked) >= 2  # Resets are masked too.
    for m, p in zip(masked, plain, strict=True):
        assert m.step_type == p.step_type and m.reward == p.reward and m.discount == p.discount
        assert m.observation.dtype == p.observation.dtype == np.float32
        np.testing.assert_array_equal(m.observation[[1, 3]], 0.0)
        np.testing.assert_array_equal(m.observation[[0, 2]], p.observation[[0, 2]])
    assert any(p.observation[1] != 0 for p in plain)  # There was something to hide.


def test_specs_are_the_inner_ones():
    inner = make_environment("gym:CartPole-v1")
    env = make_environment("mask:1,3:gym:CartPole-v1")
    assert env.observation_spec() == inner.observation_spec()
    assert env.action_spec() == inner.action_spec()
    assert env.reward_spec() == inner.reward_spec()
    assert env.discount_spec() == inner.discount_spec()


def test_flat_indices_of_an_image_and_read_only_inner_observations():
    inner = FakeEnvironment(observation_shape=(2, 3), seed=1)  # Read-only pool arrays.
    env = MaskedObservation(inner, [0, 5, 5])
    for timestep in _run(env, [0] * 10):
        assert timestep.observation[0, 0] == 0.0 and timestep.observation[1, 2] == 0.0
        assert np.count_nonzero(timestep.observation) == 4
    assert np.all(inner.step(0).observation != 0)  # The inner env's arrays are untouched.


def test_masks_nest():
    timestep = make_environment("mask:0:mask:3:fake:obs=4", seed=0).reset()
    np.testing.assert_array_equal(timestep.observation[[0, 3]], 0.0)
    assert np.all(timestep.observation[[1, 2]] != 0)


class _PositiveObservation(dm_env.Environment):
    """Observations bounded in [1, 2]: zero lies outside the inner spec."""

    def reset(self):
        return dm_env.restart(np.full(3, 1.5, np.float32))

    def step(self, action):
        return dm_env.transition(np.float32(0.0), np.full(3, 1.5, np.float32))

    def observation_spec(self):
        return specs.BoundedArray((3,), np.float32, 1.0, 2.0)

    def action_spec(self):
        return specs.DiscreteArray(1, dtype=np.int32)


def test_bounds_widen_to_include_zero_only_where_masked():
    env = MaskedObservation(_PositiveObservation(), [1])
    spec = env.observation_spec()
    np.testing.assert_array_equal(spec.minimum, [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(spec.maximum, [2.0, 2.0, 2.0])
    spec.validate(env.reset().observation)


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("mask:", r"expected 'mask:<flat indices>:<environment id>'"),
        ("mask:1,3", r"e.g. 'mask:1,3:gym:CartPole-v1'"),
        ("mask::gym:CartPole-v1", r"expected 'mask:"),
        ("mask:a:gym:CartPole-v1", r"expected 'mask:"),
        ("mask:-1:gym:CartPole-v1", r"expected 'mask:"),
        ("mask:1,,3:gym:CartPole-v1", r"expected 'mask:"),
        ("mask:1:nope:x", r"Bad inner id.*'nope'"),
        ("mask:1:gym:NoSuchEnv-v0", r"Bad inner id.*NoSuchEnv-v0"),
        ("mask:1:fake:len=0", r"Bad inner id.*len=0"),
    ],
)
def test_bad_ids_raise_value_error(env_id, message):
    with pytest.raises(ValueError, match=message):
        environment_factory(env_id)
    with pytest.raises(ValueError, match=message):
        make_environment(env_id)


def test_out_of_range_index_fails_at_build_naming_the_shape():
    factory = environment_factory("mask:1,4:gym:CartPole-v1")  # The shape is not known yet.
    with pytest.raises(ValueError, match=r"\[1, 4\].*\[0, 4\).*shape \(4,\)"):
        factory(0)
    with pytest.raises(ValueError, match="non-empty"):
        MaskedObservation(FakeEnvironment(), [])


def test_id_factory_pickles():
    factory = environment_factory("mask:1,3:gym:CartPole-v1")
    restored = pickle.loads(pickle.dumps(factory))
    np.testing.assert_array_equal(restored(3).reset().observation, factory(3).reset().observation)
