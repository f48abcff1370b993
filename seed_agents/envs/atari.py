"""Atari 2600 games as `dm_env.Environment`s, driving ale-py's C++ `ALEInterface` directly.

The usual gymnasium wrapper chain does the same preprocessing in layers of Python and halves
the environment's rate (see shared/MEASUREMENTS.md); here it is one loop over ALE calls and a
few numpy operations into buffers made once. Every step of the standard DQN / SEED RL
preprocessing is a field of `AtariConfig`:

* action repeat (4) with max-pooling over the last two emulator frames of each step, which
  removes the flicker of sprites the Atari draws on alternate frames;
* ALE's own grayscale screen, area-averaged from 210x160 down to 84x84;
* a stack of the last 4 frames, newest in the last channel: uint8 `[84, 84, stack]`;
* 1 to 30 no-op emulator frames after each game reset, for varied starts;
* sticky actions with probability 0.25 (Machado et al., 2018), done by ALE per frame;
* optionally a lost life ends the agent's episode (discount 0) without resetting the game,
  or, the protocol of CleanRL's and RLlib's Atari results, only cuts the learner's
  bootstrapping (a MID step with discount 0), so that an episode is still a whole game;
* games cut at 108,000 emulator frames (30 minutes of play): a truncation, discount 1;
* optionally FIRE pressed for one step after each game reset and each lost life, for games
  that stand still until the player fires (Breakout), as the anchors' `FireResetEnv` does.

Rewards are the game's raw score changes; clipping is the learner's business.

Ids (see `seed_agents.envs.registry`): `atari:<game>[,key=value...]`, where the game is an ALE
ROM id (`pong`, `space_invaders`) or its gymnasium-style name (`Pong`, `SpaceInvaders`) and the
keys are

    repeat=4        emulator frames per agent step (`action_repeat`)
    max_pool=1      max over the last two frames of a step (`max_pool`)
    stack=4         frames per observation (`frame_stack`)
    noops=30        most no-op frames after a game reset, 0 for none (`noop_max`)
    sticky=0.25     probability ALE repeats the previous action (`repeat_action_probability`)
    life_loss=0     a lost life is terminal for the agent (`terminal_on_life_loss`)
    life_discount=0 a lost life is a MID step with discount 0 (`discount_on_life_loss`)
    max_frames=108000  emulator frames after which a game is truncated (`max_episode_frames`)
    fire=0          press FIRE for a step after each reset and lost life (`fire_on_reset`)
    full_actions=0  all 18 joystick actions instead of the game's minimal set (`full_action_set`)

e.g. `atari:Pong`, `atari:breakout,life_loss=1`, `atari:Pong,sticky=0,noops=0,stack=1`.
`ATARI_PROTOCOLS` names the two evaluation protocols that published Atari figures use.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import ale_py
import dm_env
import numpy as np
from ale_py import roms
from dm_env import specs

from seed_agents.envs.options import parse_bool, parse_options

SCREEN_SIZE = 84
"""Height and width of every preprocessed frame."""

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)

_REWARD_SPEC = specs.Array((), np.float32, name="reward")
_DISCOUNT_SPEC = specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


# --- configuration ------------------------------------------------------------------------


@functools.cache
def _rom_ids_by_key() -> dict[str, str]:
    # ROM ids are snake_case (`space_invaders`), gymnasium names PascalCase (`SpaceInvaders`);
    # lower-case without underscores, the two spellings meet (and no two ROMs collide).
    return {rom.replace("_", ""): rom for rom in roms.get_all_rom_ids()}


def rom_id(game: str) -> str:
    """The ALE ROM id of `game`, given as a ROM id or a gymnasium-style name, any case.

    Reads the list of supported ROMs only, never a ROM, so that an id is cheap to validate.

    Raises:
      ValueError: If no supported ROM matches, suggesting close names.
    """
    if not isinstance(game, str):
        raise ValueError(f"game must be a str, got {game!r}.")
    ids = _rom_ids_by_key()
    key = game.replace("_", "").lower()
    if key in ids:
        return ids[key]
    close = difflib.get_close_matches(key, ids, n=3)
    hint = f" Did you mean {', '.join(repr(ids[c]) for c in close)}?" if close else ""
    raise ValueError(
        f"Unknown Atari game {game!r}: expected an ALE ROM id such as 'pong' or "
        f"'space_invaders' (or 'Pong', 'SpaceInvaders'); ale_py.roms.get_all_rom_ids() "
        f"lists all {len(ids)}.{hint}"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a bool, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class AtariConfig:
    """How an ALE game becomes an agent's environment; the defaults are the standard ones.

    Attributes:
      game: ALE ROM id (`"pong"`) or gymnasium-style name (`"Pong"`); stored as the ROM id.
      action_repeat: Emulator frames per agent step; the action is held for all of them and
        their rewards are summed.
      max_pool: Whether a step's frame is the pixel-wise max of its last two emulator
        frames. Needs `action_repeat >= 2`: there is nothing to pool in a one-frame step.
      frame_stack: Frames per observation, the newest in the last channel. 1 gives single
        `[84, 84, 1]` frames, for stacking elsewhere (e.g. on the inference server).
      noop_max: After each game reset, a uniformly random 1 to `noop_max` emulator frames of
        no-op are played before the first observation; 0 disables. Counted in frames, not
        agent steps, as in the DQN-era wrappers (gym's `AtariPreprocessing`, baselines).
      repeat_action_probability: Per emulator frame, the chance that ALE ignores the agent's
        action and repeats the previous one ("sticky actions", Machado et al. 2018), so that
        an open-loop sequence of actions cannot memorise a deterministic game.
      terminal_on_life_loss: Whether losing a life ends the agent's episode with discount 0.
        The game itself goes on: the next `reset` continues from where it stopped (no no-ops)
        and only a game over or truncation resets the game. Evaluation should leave this off.
      discount_on_life_loss: Whether the step that loses a life has discount 0 while the
        episode goes on (a MID step): the learner values a life's end like a game's end,
        and episode returns still count whole games, as the published figures do. Cannot
        be combined with `terminal_on_life_loss`.
      max_episode_frames: Emulator frames of a game (no-op frames included) after which it is
        truncated: the step that reaches the cap is a LAST with discount 1. With life loss
        terminal, the cap is on the whole game, not on each life.
      full_action_set: All 18 joystick actions instead of the game's minimal set (Pong: 6).
      fire_on_reset: Whether FIRE is held for one step (`action_repeat` frames) after each
        game reset (after the no-ops) and after each lost life, before the agent's next
        observation; its reward counts toward that step. Games such as Breakout stand still
        until the player fires: without it an agent must first learn to press FIRE, and a
        policy that stops pressing it plays out the game's cap doing nothing. The anchors'
        wrapper chains (baselines' `FireResetEnv`, in CleanRL and SB3) do this for every game
        whose actions include FIRE; for a game without FIRE it is refused.
    """

    game: str
    action_repeat: int = 4
    max_pool: bool = True
    frame_stack: int = 4
    noop_max: int = 30
    repeat_action_probability: float = 0.25
    terminal_on_life_loss: bool = False
    discount_on_life_loss: bool = False
    max_episode_frames: int = 108_000
    full_action_set: bool = False
    fire_on_reset: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "game", rom_id(self.game))
        _check_int("action_repeat", self.action_repeat, 1)
        _check_bool("max_pool", self.max_pool)
        if self.max_pool and self.action_repeat < 2:
            raise ValueError(
                "max_pool needs action_repeat >= 2 (it pools the last two frames of a step); "
                f"got action_repeat={self.action_repeat}. Turn max_pool off."
            )
        _check_int("frame_stack", self.frame_stack, 1)
        _check_int("noop_max", self.noop_max, 0)
        p = self.repeat_action_probability
        if (
            not isinstance(p, int | float | np.integer | np.floating)
            or isinstance(p, bool)
            or not 0.0 <= p <= 1.0  # Also rejects NaN.
        ):
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {p!r}.")
        _check_bool("terminal_on_life_loss", self.terminal_on_life_loss)
        _check_bool("discount_on_life_loss", self.discount_on_life_loss)
        if self.terminal_on_life_loss and self.discount_on_life_loss:
            raise ValueError("life_loss=1 (a lost life ends the episode) and life_discount=1 "
                             "(a lost life only has discount 0) exclude each other; pick one.")
        _check_int("max_episode_frames", self.max_episode_frames, 1)
        _check_bool("full_action_set", self.full_action_set)
        _check_bool("fire_on_reset", self.fire_on_reset)


# id key -> (AtariConfig field, parser of the value string)
_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "repeat": ("action_repeat", int),
    "max_pool": ("max_pool", parse_bool),
    "stack": ("frame_stack", int),
    "noops": ("noop_max", int),
    "sticky": ("repeat_action_probability", float),
    "life_loss": ("terminal_on_life_loss", parse_bool),
    "life_discount": ("discount_on_life_loss", parse_bool),
    "max_frames": ("max_episode_frames", int),
    "full_actions": ("full_action_set", parse_bool),
    "fire": ("fire_on_reset", parse_bool),
}
_USAGE = (
    f"valid keys: {', '.join(_OPTIONS)} "
    "(e.g. 'atari:Pong,sticky=0,noops=0,stack=1,life_loss=1,max_frames=108000')"
)


def parse_atari_id(rest: str) -> AtariConfig:
    """The config named by the part of an id after `atari:`, e.g. `"Pong,sticky=0"`.

    Raises:
      ValueError: For a missing or unknown game, an unknown or repeated key, or a bad value.
    """
    game, _, options = (s.strip() for s in rest.partition(","))
    if not game or "=" in game:
        raise ValueError(
            f"'atari:{rest}' must start with a game, e.g. 'atari:Pong' or 'atari:pong,stack=1'."
        )
    kwargs = parse_options(options, _OPTIONS, f"atari:{rest}", _USAGE)
    try:
        return AtariConfig(game=game, **kwargs)
    except ValueError as e:
        raise ValueError(f"Bad id 'atari:{rest}': {e} {_USAGE}.") from None


def single_frame_id(rest: str) -> tuple[str, int]:
    """The id (after `atari:`) of the same game making one frame per observation, and
    the frames `rest`'s observations stack: "Pong,sticky=0" -> ("Pong,sticky=0,stack=1", 4).

    For a server that stacks the frames itself (`InferenceConfig.frame_stack`): it sees
    the observations the stacked id's environment would have made.
    """
    config = parse_atari_id(rest)  # Raises for a bad id, before anything is rebuilt.
    game, _, options = rest.partition(",")
    kept = [part.strip() for part in options.split(",")
            if part.strip() and part.partition("=")[0].strip() != "stack"]
    return ",".join([game.strip(), *kept, "stack=1"]), config.frame_stack


# --- preprocessing ------------------------------------------------------------------------


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """`[n_out, n_in]`: row o weighs each input cell by its overlap with output cell o.

    Output cell o spans input cells `[o, o + 1) * n_in / n_out`; lengths are measured in units
    of `1 / n_out` input cells so that all the arithmetic is on integers until the division.
    Rows sum to 1: the area average that OpenCV's INTER_AREA computes.
    """
    out_lo = np.arange(n_out)[:, None] * n_in
    in_lo = np.arange(n_in)[None, :] * n_out
    overlap = np.minimum(out_lo + n_in, in_lo + n_out) - np.maximum(out_lo, in_lo)
    return np.clip(overlap, 0, None) / n_in


class _AreaResize:
    """Area-averages a uint8 image to another size, into buffers made once.

    Separable: rows, then columns. Each axis repeats the same small weight pattern every
    `gcd(n_in, n_out)` cells (210 -> 84: 5 rows -> 2; 160 -> 84: 40 columns -> 21), so each
    axis is one small float32 matmul over blocks instead of a dense `[84, 210]` one: about
    20 us for 210x160 -> 84x84 here, against ~30 us single-threaded dense, and a dense
    matmul that size also wakes BLAS's threads, which on a shared machine cost ~190 us.
    """

    def __init__(self, in_shape: tuple[int, int], out_shape: tuple[int, int]):
        (in_h, in_w), (out_h, out_w) = in_shape, out_shape
        row_blocks, col_blocks = math.gcd(in_h, out_h), math.gcd(in_w, out_w)
        row_in, row_out = in_h // row_blocks, out_h // row_blocks
        col_in, col_out = in_w // col_blocks, out_w // col_blocks
        # The first block of each weight matrix; every block is the same.
        self._row_weights = _area_weights(in_h, out_h)[:row_out, :row_in].astype(np.float32)
        self._col_weights = np.ascontiguousarray(
            _area_weights(in_w, out_w)[:col_out, :col_in].T.astype(np.float32)
        )
        self._image = np.empty(in_shape, np.float32)
        self._rows = np.empty((out_h, in_w), np.float32)
        self._out = np.empty(out_shape, np.float32)
        self._image_blocks = self._image.reshape(row_blocks, row_in, in_w)
        self._rows_blocks = self._rows.reshape(row_blocks, row_out, in_w)
        self._rows_by_column_block = self._rows.reshape(out_h * col_blocks, col_in)
        self._out_by_column_block = self._out.reshape(out_h * col_blocks, col_out)

    def __call__(self, image: np.ndarray, out: np.ndarray) -> None:
        """Writes the resized `image` (uint8) into `out` (uint8), rounded to nearest."""
        np.copyto(self._image, image)
        np.matmul(self._row_weights, self._image_blocks, out=self._rows_blocks)
        np.matmul(self._rows_by_column_block, self._col_weights, out=self._out_by_column_block)
        # Averages of uint8 stay within [0, 255], so adding 0.5 and truncating rounds.
        np.add(self._out, 0.5, out=self._out)
        np.copyto(out, self._out, casting="unsafe")


class _StepScratch:
    """The buffers one step writes and reads back before it returns: the grayscale screens
    it pools and the resize's float32 working images (~280 KB for a 210x160 screen).

    Nothing in them outlives a step (the step's frame is copied out), so every environment
    that one thread steps shares one set: a runner stepping 256 environments in turn then
    keeps ~280 KB hot in its core's cache instead of cycling 256 x 280 KB through it.
    Measured here (2-core EPYC, Pong environments stepped in turn with random actions, CPU
    per step): 128, 256 and 384 single-frame environments 287 us with a set each, 278-281
    shared (268-272 for a lone environment); with 4-frame stacks 292-295 against 281-282.
    """

    def __init__(self, height: int, width: int):
        self.screen = np.empty((height, width), np.uint8)
        self.previous_screen = np.empty((height, width), np.uint8)
        self.resize = _AreaResize((height, width), (SCREEN_SIZE, SCREEN_SIZE))


_THREAD_SCRATCH = threading.local()


def _step_scratch(height: int, width: int) -> _StepScratch:
    """This thread's `_StepScratch` for screens of that size (threads never share one:
    environments stepped on different threads at once must not write the same buffers)."""
    by_size = getattr(_THREAD_SCRATCH, "by_size", None)
    if by_size is None:
        by_size = _THREAD_SCRATCH.by_size = {}
    scratch = by_size.get((height, width))
    if scratch is None:
        scratch = by_size[height, width] = _StepScratch(height, width)
    return scratch


# --- environment --------------------------------------------------------------------------


class AtariEnvironment(dm_env.Environment):
    """One ALE game, preprocessed as `config` says (see `AtariConfig` and the module doc).

    Observations are uint8 `[84, 84, frame_stack]`, the newest frame in the last channel.
    After a reset every channel holds the first frame (not zeros), so the stack is always
    made of real frames. Each observation is a new read-only array that the environment
    never changes: keep it without copying (the environment reads it to build the next one).

    Follows dm_env's auto-reset convention: `step` before the first `reset`, or after a LAST
    timestep, ignores its action and starts a new episode.

    Args:
      config: The game and its preprocessing.
      seed: Seeds both ALE (sticky actions, the game's own randomness) and the no-op counts,
        once: equal seeds and actions give equal sequences of episodes.
    """

    def __init__(self, config: AtariConfig, seed: int | None = None):
        if not isinstance(config, AtariConfig):
            raise TypeError(f"Expected an AtariConfig, got {config!r}.")
        self._config = config
        self._rng = np.random.default_rng(seed)

        # Static, and before the constructor, so that ALE's banner is not printed either.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        ale = ale_py.ALEInterface()
        # Settings are read when the ROM loads, so they all come first.
        ale.setInt("random_seed", int(self._rng.integers(0, 2**31 - 1)))
        ale.setFloat("repeat_action_probability", float(config.repeat_action_probability))
        # The frame loop and the episode cap are done here: ALE's own frame skip cannot
        # keep the second-to-last frame for pooling.
        ale.setInt("frame_skip", 1)
        ale.setInt("max_num_frames_per_episode", 0)
        ale.loadROM(str(roms.get_rom_path(config.game)))
        self._ale = ale

        actions = ale.getLegalActionSet() if config.full_action_set else ale.getMinimalActionSet()
        self._actions = tuple(actions)
        if config.fire_on_reset and ale_py.Action.FIRE not in self._actions:
            raise ValueError(f"fire=1: {config.game} has no FIRE action to press after a reset.")

        height, width = ale.getScreenDims()
        self._screen_size = (height, width)  # Its step buffers: `_step_scratch`.
        self._frame = np.empty((SCREEN_SIZE, SCREEN_SIZE), np.uint8)
        self._observation_shape = (SCREEN_SIZE, SCREEN_SIZE, config.frame_stack)
        self._observation: np.ndarray | None = None

        self._observation_spec = specs.BoundedArray(
            self._observation_shape, np.uint8, 0, 255, name="observation"
        )
        self._action_spec = specs.DiscreteArray(len(self._actions), dtype=np.int32, name="action")

        self._lives = 0
        # Set only by a LAST for a lost life: the next reset then goes on with the same game.
        # Any other reset, including one in mid-episode, starts a new game.
        self._continue_game = False
        self._reset_next_step = True

    @property
    def config(self) -> AtariConfig:
        return self._config

    @property
    def ale(self) -> ale_py.ALEInterface:
        """The emulator (e.g. for rendering with `getScreenRGB`, or for tests)."""
        return self._ale

    def _play(self, action: ale_py.Action, frames: int) -> int:
        """Holds `action` for up to `frames` frames (fewer at game over); the reward sum.

        Leaves the resized screen in `self._frame`, max-pooled over the last two frames if
        the config says so and there were two.
        """
        ale = self._ale
        scratch = _step_scratch(*self._screen_size)
        screen = scratch.screen
        # The frame whose screen is kept for pooling with the last; -1: none.
        pool_from = frames - 2 if self._config.max_pool else -1
        reward = 0
        frame = -1
        for frame in range(frames):
            reward += ale.act(action)
            if frame == pool_from:
                ale.getScreenGrayscale(scratch.previous_screen)
            if ale.game_over():
                break
        ale.getScreenGrayscale(screen)
        if 0 <= pool_from <= frame:
            np.maximum(screen, scratch.previous_screen, out=screen)
        scratch.resize(screen, self._frame)
        return reward

    def _restart_stack(self) -> np.ndarray:
        observation = np.empty(self._observation_shape, np.uint8)
        observation[...] = self._frame[:, :, None]
        observation.flags.writeable = False
        self._observation = observation
        return observation

    def _push_frame(self) -> np.ndarray:
        observation = np.empty(self._observation_shape, np.uint8)
        if self._config.frame_stack > 1:
            # One contiguous byte shift moves each pixel's frames down a channel; the last
            # channel, which picks up the next pixel's oldest frame, is overwritten below.
            # About 2 us, where copying the strided `[..., 1:]` slice takes ~60 us.
            observation.reshape(-1)[:-1] = self._observation.reshape(-1)[1:]
        observation[:, :, -1] = self._frame
        observation.flags.writeable = False
        self._observation = observation
        return observation

    def reset(self) -> dm_env.TimeStep:
        if self._continue_game:
            # A life was lost: the game goes on from its last frame, already in `_frame`.
            self._continue_game = False
            if self._config.fire_on_reset:
                self._play(ale_py.Action.FIRE, self._config.action_repeat)
        else:
            self._ale.reset_game()
            noop_max = self._config.noop_max
            noops = int(self._rng.integers(1, noop_max + 1)) if noop_max else 0
            self._play(ale_py.Action.NOOP, noops)
            if self._ale.game_over():  # Never seen: 30 frames are too few to lose a game.
                self._ale.reset_game()
                self._play(ale_py.Action.NOOP, 0)
            if self._config.fire_on_reset:
                self._play(ale_py.Action.FIRE, self._config.action_repeat)
        self._lives = self._ale.lives()
        self._reset_next_step = False
        return dm_env.restart(self._restart_stack())

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._reset_next_step:
            return self.reset()
        index = int(action)
        if not 0 <= index < len(self._actions):
            raise ValueError(f"Action {index} is outside [0, {len(self._actions)}).")
        repeat = self._config.action_repeat
        reward = self._play(self._actions[index], repeat)
        ale = self._ale
        lives = ale.lives()
        life_lost = lives < self._lives
        if (life_lost and self._config.fire_on_reset and not ale.game_over()
                and not self._config.terminal_on_life_loss):
            # The game goes on in this episode: serve the next ball now. (With a lost life
            # terminal, the reset that continues the game fires instead.)
            reward += self._play(ale_py.Action.FIRE, repeat)
        reward = np.float32(reward)
        observation = self._push_frame()

        game_over = ale.game_over()
        truncated = ale.getEpisodeFrameNumber() >= self._config.max_episode_frames
        self._lives = lives
        if game_over or (life_lost and self._config.terminal_on_life_loss):
            # Checked before truncation: when both hold, the future is still worth nothing.
            self._reset_next_step = True
            self._continue_game = not (game_over or truncated)
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, _ZERO, observation)
        discount = _ZERO if life_lost and self._config.discount_on_life_loss else _ONE
        if truncated:
            self._reset_next_step = True
            return dm_env.truncation(reward, observation, discount=discount)
        return dm_env.transition(reward, observation, discount=discount)

    def observation_spec(self) -> specs.BoundedArray:
        return self._observation_spec

    def action_spec(self) -> specs.DiscreteArray:
        return self._action_spec

    def reward_spec(self) -> specs.Array:
        return _REWARD_SPEC

    def discount_spec(self) -> specs.BoundedArray:
        return _DISCOUNT_SPEC


ATARI_PROTOCOLS: dict[str, str] = {
    "ale_v5": "",
    "no_sticky_life_loss": "sticky=0,life_discount=1",
}
"""Evaluation protocols by name -> the `atari:<game>` options that select them.

- `ale_v5`: Machado et al.'s recommendation and gymnasium's v5 envs (sticky actions 0.25,
  the minimal action set, no life-loss signal); the defaults. IMPALA's Atari figures in
  Cleanba and TorchBeast use it.
- `no_sticky_life_loss`: the protocol of CleanRL's PPO and RLlib's APPO Atari results: no
  sticky actions, a lost life is a step with discount 0 for learning, and returns are still
  counted per game. (Pong has no lives, so there only sticky actions differ.)
"""


def protocol_env_id(game: str, protocol: str) -> str:
    """`atari:<game>` under the named protocol, e.g. ("Pong", "ale_v5") -> "atari:Pong"."""
    if protocol not in ATARI_PROTOCOLS:
        raise ValueError(f"Unknown Atari protocol {protocol!r}; choose from "
                         f"{sorted(ATARI_PROTOCOLS)}.")
    options = ATARI_PROTOCOLS[protocol]
    return f"atari:{game},{options}" if options else f"atari:{game}"


def make_atari(rest: str, seed: int | None = None) -> AtariEnvironment:
    """Builds the environment named by the part of an id after `atari:`, e.g. `"Pong"`."""
    return AtariEnvironment(parse_atari_id(rest), seed=seed)
