"""The actor-environment loop, stoppable from another thread through an event, and
`play_episode`: one episode, optionally filmed (evaluation, offline runs)."""

from __future__ import annotations

import threading
from typing import Any

import dm_env

from seed_agents.core import Actor
from seed_agents.utils.counting import Counter


class EnvironmentLoop:
    """Runs episodes of `actor` in `environment`; counts steps and episodes.

    `run` returns when `stop_event` is set (checked every step), or after `num_episodes`
    episodes or `num_steps` steps, whichever comes first. No signal handlers: the caller
    owns process-level concerns.
    """

    def __init__(
        self,
        environment: dm_env.Environment,
        actor: Actor,
        counter: Counter | None = None,
        stop_event: threading.Event | None = None,
    ):
        self._environment = environment
        self._actor = actor
        self._counter = counter or Counter()
        self._stop_event = stop_event or threading.Event()
        self.episode_returns: list[float] = []

    def run_episode(self) -> dict[str, float]:
        """Runs one episode (or until stopped) and returns its return and length."""
        timestep = self._environment.reset()
        self._actor.observe_first(timestep)
        episode_return, length = 0.0, 0
        while not timestep.last() and not self._stop_event.is_set():
            action = self._actor.select_action(timestep.observation)
            timestep = self._environment.step(action)
            self._actor.observe(action, next_timestep=timestep)
            self._actor.update()
            episode_return += float(timestep.reward or 0.0)
            length += 1
        if timestep.last():
            self.episode_returns.append(episode_return)
        counts = self._counter.increment(env_steps=length, episodes=int(timestep.last()))
        return {"episode_return": episode_return, "episode_length": length, **counts}

    def run(self, num_episodes: int | None = None, num_steps: int | None = None) -> None:
        episodes = steps = 0
        while not self._stop_event.is_set():
            if num_episodes is not None and episodes >= num_episodes:
                break
            if num_steps is not None and steps >= num_steps:
                break
            result = self.run_episode()
            episodes += 1
            steps += int(result["episode_length"])


def play_episode(env: Any, actor: Any, frame: Any = None, writer: Any = None,
                 max_steps: int | None = None) -> tuple[float, int]:
    """One episode; with a writer, a frame after the reset and after every step."""
    timestep = env.reset()
    actor.observe_first(timestep)
    if writer is not None:
        writer.write(frame())
    episode_return, length = 0.0, 0
    while not timestep.last() and (max_steps is None or length < max_steps):
        action = actor.select_action(timestep.observation)
        timestep = env.step(action)
        actor.observe(action, next_timestep=timestep)
        episode_return += float(timestep.reward or 0.0)
        length += 1
        if writer is not None:
            writer.write(frame())
    return episode_return, length
