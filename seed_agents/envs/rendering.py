"""Environments that show what they do: RGB frames for a video of an episode.

Training never renders (it costs more than a step), so an id builds an environment
without it; `make_rendering_environment` builds one that can:

* `gym:<id>`: the gymnasium environment made with `render_mode="rgb_array"` (classic
  control renders through pygame);
* `atari:<game>`: the emulator's full-colour screen (`ale.getScreenRGB()`), one frame per
  agent step, at 60 / action_repeat frames per second (real time);
* `mask:<indices>:<id>`: the inner environment's frames (the mask hides nothing on screen);
* any other environment whose object has a `render()` method returning an `[H, W, 3]`
  uint8 array (e.g. a custom prefix's).

Anything else (the `fake:` environment) raises `CannotRenderError` saying so.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable

import dm_env
import gymnasium
import numpy as np

from seed_agents.envs.gym_adapter import GymToDmEnv
from seed_agents.envs.masked import MaskedObservation, parse_mask_id
from seed_agents.envs.registry import make_environment, validate_environment_id

_DEFAULT_FPS = 30.0


class CannotRenderError(ValueError):
    """The environment has no way to show its frames."""


@dataclasses.dataclass
class RenderingEnvironment:
    """An environment, how to read its current frame, and the frame rate of real time."""

    environment: dm_env.Environment
    frame: Callable[[], np.ndarray]
    fps: float


def make_rendering_environment(env_id: str, seed: int | None = None) -> RenderingEnvironment:
    """The environment `env_id` names, made so that it can render RGB frames.

    Raises:
      CannotRenderError: naming the environment, when it cannot render; nothing is made.
      ValueError: for an id that does not parse.
    """
    validate_environment_id(env_id)
    _check_renders(env_id)
    environment = _make(env_id, seed)
    try:
        frame, fps = _frame_source(environment, env_id)
    except CannotRenderError:
        environment.close()
        raise
    return RenderingEnvironment(environment, frame, fps)


def _check_renders(env_id: str, shown: str | None = None) -> None:
    """Fails before an environment is made, for the ids known not to render; errors name
    `shown` (the id the user gave, around a `mask:`'s inner one)."""
    shown = shown or env_id
    prefix, _, rest = env_id.partition(":")
    if prefix == "mask":
        _check_renders(parse_mask_id(rest)[1], shown)
    elif prefix == "gym" and ":" not in rest:
        modes = _render_modes(rest)
        if "rgb_array" not in modes:
            raise CannotRenderError(
                f"{shown} cannot render frames for a video: gymnasium's {rest} renders "
                f"{modes or 'nothing'}, not 'rgb_array'.")
    elif prefix == "fake":
        raise CannotRenderError(f"{shown} cannot render frames for a video: the fake "
                                "environment has no picture (use gym:, atari: or mask: ids).")


def _render_modes(gym_id: str) -> list[str]:
    """The render modes gymnasium says an environment supports (from its class)."""
    spec = gymnasium.spec(gym_id)
    entry = spec.entry_point
    if callable(entry):
        return list(getattr(entry, "metadata", {}).get("render_modes", []))
    module, _, name = entry.partition(":")
    env_class = getattr(importlib.import_module(module), name)
    return list(getattr(env_class, "metadata", {}).get("render_modes", []))


def _make(env_id: str, seed: int | None) -> dm_env.Environment:
    prefix, _, rest = env_id.partition(":")
    if prefix == "gym":
        # Frames are drawn off screen: SDL (pygame, for classic control) needs no display
        # and no sound device, and complains on stderr when it looks for one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        return GymToDmEnv(gymnasium.make(rest, render_mode="rgb_array",
                                         disable_env_checker=True), seed=seed)
    if prefix == "mask":
        indices, inner = parse_mask_id(rest)
        return MaskedObservation(_make(inner, seed), indices)
    return make_environment(env_id, seed)


def _frame_source(environment: dm_env.Environment,
                  env_id: str) -> tuple[Callable[[], np.ndarray], float]:
    if isinstance(environment, MaskedObservation):
        return _frame_source(environment.inner, env_id)
    if isinstance(environment, GymToDmEnv):
        gym_env = environment.gym_env
        if gym_env.render_mode != "rgb_array":
            raise CannotRenderError(f"{env_id} cannot render frames for a video: its "
                                    f"render mode is {gym_env.render_mode!r}.")
        return gym_env.render, float(gym_env.metadata.get("render_fps") or _DEFAULT_FPS)
    from seed_agents.envs.atari import AtariEnvironment  # ale-py: only once needed

    if isinstance(environment, AtariEnvironment):
        return environment.ale.getScreenRGB, 60.0 / environment.config.action_repeat
    render = getattr(environment, "render", None)
    if callable(render):
        return render, float(getattr(environment, "render_fps", _DEFAULT_FPS))
    raise CannotRenderError(f"{env_id} cannot render frames for a video: "
                            f"{type(environment).__name__} has no render() method.")
