"""A uniformly random policy's mean return: the floor every learning benchmark reports.

Benchmarks measure it in the same run as the agent (`baseline` in their JSON line), so
that a learning figure reads as progress over random play on the same machine and code.
"""

from __future__ import annotations

import numpy as np
from dm_env import specs

from seed_agents.envs.registry import make_environment


def random_return(env_id: str, episodes: int, seed: int) -> float:
    """Mean return over `episodes` whole episodes of uniformly random actions.

    Discrete actions are drawn from the spec's `num_values`; bounded float actions
    uniformly between the spec's bounds (for `gym:` and `dmc:` ids, the [-1, 1] agents see).
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    env = make_environment(env_id, seed)
    rng = np.random.default_rng(seed)
    spec = env.action_spec()
    if isinstance(spec, specs.DiscreteArray):
        def sample():
            return spec.dtype.type(rng.integers(spec.num_values))
    else:
        low = np.broadcast_to(spec.minimum, spec.shape)
        high = np.broadcast_to(spec.maximum, spec.shape)

        def sample():
            return rng.uniform(low, high).astype(spec.dtype)
    total = 0.0
    try:
        for _ in range(episodes):
            timestep = env.reset()
            while not timestep.last():
                timestep = env.step(sample())
                total += float(timestep.reward)
    finally:
        env.close()
    return total / episodes
