"""MinAtar's five games (Young & Tian, 2019) as `dm_env.Environment`s.

MinAtar re-implements Breakout, Asterix, Freeway, Seaquest and Space Invaders on a 10x10
grid whose observation is one binary plane per kind of object, `[10, 10, C]`. It keeps what
makes Atari hard to learn from (pixels, delayed rewards, exploration) at a thousandth of
the emulator's cost, so a pixel learner can be checked in minutes instead of hours. It has
no frame skip: one agent step is one frame.

The games come from the `minatar` package, which is GPL-3.0 while seed-agents is Apache-2.0:
it is an optional extra (`pip install -e '.[minatar]'`), imported only when a `minatar:` id
is used, and an id used without it says how to install it.

Ids (see `seed_agents.envs.registry`): `minatar:<game>[,key=value...]`, the game one of
`MINATAR_GAMES` (`SpaceInvaders` and `space-invaders` spell `space_invaders` too), keys

    sticky=0.1      probability the previous action is repeated (the package's default)
    ramping=1       difficulty ramping of Asterix, Freeway, Seaquest, Space Invaders
    max_steps=0     steps after which an episode is truncated (discount 1); 0: never
    full_actions=0  all six actions instead of the game's minimal set

The defaults are the published protocol of the MinAtar paper's results (sticky actions 0.1,
ramping on, the minimal action set, no episode cap).

Observations are `bool [10, 10, C]`: one byte per cell on the wire, as uint8 would be, and
the pixel torsos read a bool plane as 0/1 rather than as an intensity out of 255.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from seed_agents.envs.options import parse_bool, parse_options

MINATAR_GAMES: tuple[str, ...] = ("asterix", "breakout", "freeway", "seaquest",
                                  "space_invaders")
"""The games the `minatar` package has, by the module names it loads them by."""

GRID_SIZE = 10
"""Height and width of every MinAtar observation."""

INSTALL_HINT = ("MinAtar is an optional extra (the `minatar` package is GPL-3.0): "
                "install it with `pip install -e '.[minatar]'` (or `pip install minatar`).")

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_REWARD_SPEC = specs.Array((), np.float32, name="reward")
_DISCOUNT_SPEC = specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


def game_name(game: str) -> str:
    """The package's module name for `game`, any case, `_`/`-` or CamelCase.

    Raises:
      ValueError: naming the five games, for anything else.
    """
    key = game.strip().lower().replace("-", "").replace("_", "")
    for name in MINATAR_GAMES:
        if name.replace("_", "") == key:
            return name
    raise ValueError(f"Unknown MinAtar game {game!r}; the games are "
                     f"{', '.join(MINATAR_GAMES)}.")


@dataclasses.dataclass(frozen=True)
class MinAtarConfig:
    """One MinAtar game and its protocol; see the module doc for the keys of an id.

    Attributes:
      game: one of `MINATAR_GAMES`.
      sticky_action_probability: the chance each step repeats the previous action instead
        of the chosen one (MinAtar's default 0.1, after Machado et al., 2018).
      difficulty_ramping: the games that speed up over an episode do so (the default).
      max_episode_steps: an episode is truncated (discount 1) after this many steps;
        0 never truncates, as the MinAtar paper's protocol. A good Breakout player's
        episodes never end without one (bricks come back when cleared).
      full_action_set: all six actions (no-op, left, up, right, down, fire) instead of
        the ones that do something in this game.
    """

    game: str
    sticky_action_probability: float = 0.1
    difficulty_ramping: bool = True
    max_episode_steps: int = 0
    full_action_set: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "game", game_name(self.game))
        if not 0.0 <= self.sticky_action_probability <= 1.0:
            raise ValueError("sticky must be a probability in [0, 1], got "
                             f"{self.sticky_action_probability}.")
        if self.max_episode_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {self.max_episode_steps}.")


_OPTIONS = {
    "sticky": ("sticky_action_probability", float),
    "ramping": ("difficulty_ramping", parse_bool),
    "max_steps": ("max_episode_steps", int),
    "full_actions": ("full_action_set", parse_bool),
}
_USAGE = ("keys: sticky, ramping, max_steps, full_actions "
          "(e.g. 'minatar:breakout,sticky=0.1,max_steps=10000')")


def parse_minatar_id(rest: str) -> MinAtarConfig:
    """The config of `minatar:<rest>`; checks the id without importing the package."""
    game, _, options = rest.partition(",")
    if not game.strip():
        raise ValueError(f"'minatar:' needs a game, one of {', '.join(MINATAR_GAMES)}.")
    kwargs = parse_options(options, _OPTIONS, f"minatar:{rest}", _USAGE)
    return MinAtarConfig(game, **kwargs)


def _import_environment() -> Any:
    try:
        from minatar import Environment
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return Environment


# One colour per channel for `render`, cycled for games with more channels than colours.
_PALETTE = np.array([
    [255, 214, 0], [0, 176, 255], [255, 82, 82], [105, 240, 174], [224, 64, 251],
    [255, 145, 0], [64, 196, 255], [178, 255, 89], [255, 255, 255], [158, 158, 158],
], np.uint8)


class MinAtarEnvironment(dm_env.Environment):
    """One MinAtar game as `config` says, with dm_env's auto-reset convention.

    Observations are new read-only `bool [10, 10, C]` arrays. Rewards are the game's own
    (small non-negative integers: a point per brick, enemy, treasure or crossing); a
    terminal step has discount 0 and a truncation (`max_episode_steps`) discount 1.

    Args:
      config: The game and its protocol.
      seed: Seeds the game and its sticky actions: equal seeds and actions give equal
        episodes.
    """

    def __init__(self, config: MinAtarConfig, seed: int | None = None):
        if not isinstance(config, MinAtarConfig):
            raise TypeError(f"Expected a MinAtarConfig, got {config!r}.")
        environment_class = _import_environment()
        self._config = config
        self._env = environment_class(
            config.game, sticky_action_prob=config.sticky_action_probability,
            difficulty_ramping=config.difficulty_ramping)
        # The package draws from an unseeded RandomState unless seeded; a seed of None
        # still gets a fresh one, from numpy's entropy.
        self._env.seed(int(np.random.default_rng(seed).integers(0, 2**31 - 1)))
        actions = range(6) if config.full_action_set else self._env.minimal_action_set()
        self._actions = tuple(int(a) for a in actions)
        self._channels = int(self._env.state_shape()[2])
        self._observation_spec = specs.BoundedArray(
            (GRID_SIZE, GRID_SIZE, self._channels), bool, False, True, name="observation")
        self._action_spec = specs.DiscreteArray(len(self._actions), dtype=np.int32,
                                                name="action")
        self._steps = 0
        self._reset_next_step = True

    @property
    def config(self) -> MinAtarConfig:
        return self._config

    def _observation(self) -> np.ndarray:
        observation = self._env.state()  # a new array each call: safe to hand out
        observation.flags.writeable = False
        return observation

    def reset(self) -> dm_env.TimeStep:
        self._env.reset()
        self._steps = 0
        self._reset_next_step = False
        return dm_env.restart(self._observation())

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next_step:
            return self.reset()
        index = int(action)
        if not 0 <= index < len(self._actions):
            raise ValueError(f"Action {index} is outside [0, {len(self._actions)}).")
        reward, terminal = self._env.act(self._actions[index])
        reward = np.float32(reward)
        self._steps += 1
        observation = self._observation()
        if terminal:
            self._reset_next_step = True
            return dm_env.termination(reward, observation)
        cap = self._config.max_episode_steps
        if cap and self._steps >= cap:
            self._reset_next_step = True
            return dm_env.truncation(reward, observation)
        return dm_env.transition(reward, observation)

    def render(self, scale: int = 16) -> np.ndarray:
        """The current grid as an RGB image, `[10 * scale, 10 * scale, 3]` uint8: each
        cell coloured by the last channel that is on in it, black where none is."""
        state = self._env.state()
        image = np.zeros((GRID_SIZE, GRID_SIZE, 3), np.uint8)
        for channel in range(self._channels):
            image[state[:, :, channel]] = _PALETTE[channel % len(_PALETTE)]
        return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)

    render_fps = 15.0
    """Frames per second of a video: MinAtar has no real time; slow enough to follow."""

    def observation_spec(self) -> specs.BoundedArray:
        return self._observation_spec

    def action_spec(self) -> specs.DiscreteArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _REWARD_SPEC

    def discount_spec(self) -> specs.BoundedArray:
        return _DISCOUNT_SPEC


def make_minatar(rest: str, seed: int | None = None) -> MinAtarEnvironment:
    """Builds the environment named by the part of an id after `minatar:`."""
    return MinAtarEnvironment(parse_minatar_id(rest), seed=seed)
