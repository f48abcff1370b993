"""Environments as `dm_env.Environment`s, and string ids that name them.

Everything here is framework-free: environments run in actor processes that never load
a deep-learning library.
"""

from seed_agents.envs.canonical import canonical_environment
from seed_agents.envs.fake import FakeEnvironment
from seed_agents.envs.gym_adapter import GymToDmEnv
from seed_agents.envs.registry import (
    EnvironmentFactory,
    environment_factory,
    make_environment,
    register,
)

__all__ = [
    "EnvironmentFactory",
    "FakeEnvironment",
    "GymToDmEnv",
    "canonical_environment",
    "environment_factory",
    "make_environment",
    "register",
]
