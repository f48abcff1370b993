"""The environment runner: steps K environments, asks a policy server for their actions.

A runner holds no network parameters and imports neither TensorFlow nor Reverb (numpy
and the environments only), so it starts fast and stays small. Its loop is SEED's: infer,
step, repeat. How `infer` reaches the server (a direct call, a gRPC stream) is not its
business.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import dm_env
import numpy as np

from seed_agents.envs.registry import EnvironmentFactory
from seed_agents.inference.protocol import StepBatch

Infer = Callable[[StepBatch], np.ndarray]


class EnvRunner:
    """K environments stepped in lockstep; their results travel as one `StepBatch`.

    Environments follow dm_env's auto-reset convention: stepping after a LAST timestep
    starts a new episode (the action is ignored), so a LAST step costs one extra round
    trip per episode and keeps the final observation for bootstrapping.
    """

    def __init__(self, environment_factory: EnvironmentFactory, num_envs: int, seed: int = 0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self.envs = [environment_factory(seed + i) for i in range(num_envs)]
        spec = self.envs[0].observation_spec()
        self._batch = StepBatch(
            observation=np.zeros((num_envs, *spec.shape), spec.dtype),
            reward=np.zeros(num_envs, np.float32),
            discount=np.ones(num_envs, np.float32),
            step_type=np.zeros(num_envs, np.uint8),
        )
        self.rounds = 0  # Round trips completed: each stepped every environment once.

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    @property
    def env_steps(self) -> int:
        return self.rounds * len(self.envs)

    def _record(self, i: int, timestep: dm_env.TimeStep) -> None:
        batch = self._batch
        batch.observation[i] = timestep.observation
        batch.reward[i] = 0.0 if timestep.reward is None else timestep.reward
        batch.discount[i] = 1.0 if timestep.discount is None else timestep.discount
        batch.step_type[i] = timestep.step_type

    def run(
        self,
        infer: Infer,
        stop_event: threading.Event | None = None,
        max_steps: int | None = None,
    ) -> None:
        """Steps until `stop_event` is set or `max_steps` more rounds are done.

        The batch arrays are reused every round: `infer` must be done with them when it
        returns (the inference server copies what it keeps).
        """
        stop_event = stop_event or threading.Event()
        for i, env in enumerate(self.envs):
            self._record(i, env.reset())
        end = None if max_steps is None else self.rounds + max_steps
        while not stop_event.is_set() and (end is None or self.rounds < end):
            actions = infer(self._batch)
            for i, env in enumerate(self.envs):
                self._record(i, env.step(actions[i]))
            self.rounds += 1

    def close(self) -> None:
        for env in self.envs:
            env.close()
