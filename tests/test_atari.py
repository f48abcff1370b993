"""Tests for the Atari environment, on the real emulator (Pong and Breakout ROMs of ale-py)."""

from __future__ import annotations

import pickle

import dm_env
import numpy as np
import pytest
from dm_env import specs

from seed_agents.envs import environment_factory, make_environment
from seed_agents.envs.atari import AtariConfig, AtariEnvironment, _AreaResize, parse_atari_id
from seed_agents.specs import make_environment_spec

# Pong's minimal action set: NOOP, FIRE, RIGHT (up), LEFT (down), RIGHTFIRE, LEFTFIRE.
_UP, _DOWN = 2, 3
# Breakout's: NOOP, FIRE (launches the ball), RIGHT, LEFT.
_FIRE = 1


def _make(rest: str, seed: int = 0) -> AtariEnvironment:
    env = make_environment(f"atari:{rest}", seed)
    assert isinstance(env, AtariEnvironment)
    return env


def _reference_area_resize(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Exact area average, unrounded: upsample by repetition, then average equal blocks."""
    in_h, in_w = image.shape
    rows = np.repeat(image.astype(np.float64), out_h, axis=0)
    rows = rows.reshape(out_h, in_h, in_w).mean(axis=1)
    columns = np.repeat(rows, out_w, axis=1)
    return columns.reshape(out_h, out_w, in_w).mean(axis=2)


def _frames(env: AtariEnvironment, actions) -> list[np.ndarray]:
    timesteps = [env.reset()] + [env.step(a) for a in actions]
    assert not any(ts.last() for ts in timesteps[1:])
    return [ts.observation for ts in timesteps]


# --- preprocessing ------------------------------------------------------------------------


@pytest.mark.parametrize("out_shape", [(84, 84), (105, 80), (50, 70)])
def test_resize_is_the_area_average(out_shape):
    image = np.random.default_rng(0).integers(0, 256, (210, 160), dtype=np.uint8)
    out = np.empty(out_shape, np.uint8)
    _AreaResize((210, 160), out_shape)(image, out)
    expected = _reference_area_resize(image, *out_shape)
    assert np.abs(out - expected).max() <= 0.5 + 1e-3  # Rounded to nearest.


def test_specs_and_observations():
    env = _make("Pong")
    spec = make_environment_spec(env)
    assert spec.observations == specs.BoundedArray((84, 84, 4), np.uint8, 0, 255)
    assert spec.actions == specs.DiscreteArray(6, dtype=np.int32)
    assert spec.rewards.dtype == np.float32 and spec.discounts.dtype == np.float32
    timesteps = [env.reset()] + [env.step(a % 6) for a in range(20)]
    for timestep in timesteps:
        spec.observations.validate(timestep.observation)
        assert not timestep.observation.flags.writeable
    for timestep in timesteps[1:]:
        spec.rewards.validate(timestep.reward)
        spec.discounts.validate(timestep.discount)
        assert timestep.mid() and timestep.discount == 1.0
    assert timesteps[-1].observation.std() > 0  # A real screen, not a blank buffer.
    assert make_environment_spec(_make("pong,full_actions=1")).num_actions == 18


def test_rejects_out_of_range_actions():
    env = _make("pong")
    env.reset()
    with pytest.raises(ValueError, match="outside"):
        env.step(6)
    with pytest.raises(ValueError, match="outside"):
        env.step(-1)
    assert env.step(np.int64(5)).mid()


@pytest.mark.parametrize("stack", [3, 4])
def test_frame_stack_shifts_and_restarts_with_the_first_frame(stack):
    actions = [_UP] * 10 + [_DOWN] * 10
    # Equal seeds and actions: the single-frame env shows the frames the stack is made of.
    singles = [obs[:, :, 0] for obs in _frames(_make("pong,stack=1"), actions)]
    stacked = _frames(_make(f"pong,stack={stack}"), actions)
    assert stacked[0].shape == (84, 84, stack)
    for channel in range(stack):
        np.testing.assert_array_equal(stacked[0][:, :, channel], singles[0])
    for previous, observation, single in zip(stacked, stacked[1:], singles[1:], strict=False):
        np.testing.assert_array_equal(observation[:, :, :-1], previous[:, :, 1:])
        np.testing.assert_array_equal(observation[:, :, -1], single)
    assert not np.array_equal(singles[1], singles[-1])  # The test saw the paddle move.


@pytest.mark.parametrize("max_pool", [True, False])
def test_frame_is_the_max_of_the_last_two_emulator_frames(max_pool):
    env = _make(f"pong,stack=1,sticky=0,max_pool={int(max_pool)}")
    env.reset()
    for _ in range(30):  # Until the ball is in play.
        env.step(_UP)
    ale = env.ale
    state = ale.cloneState()
    observation = env.step(_DOWN).observation[:, :, 0]

    ale.restoreState(state)
    screens = []
    for _ in range(4):
        ale.act(ale.getMinimalActionSet()[_DOWN])
        screens.append(ale.getScreenGrayscale())
    assert not np.array_equal(screens[-2], screens[-1])  # Pooling has something to do.
    screen = np.maximum(screens[-2], screens[-1]) if max_pool else screens[-1]
    expected = _reference_area_resize(screen, 84, 84)
    assert np.abs(observation - expected).max() <= 0.5 + 1e-3


# --- starts, seeds and sticky actions -----------------------------------------------------


def test_without_noops_and_sticky_actions_equal_seeds_start_alike():
    a, b = _make("pong,noops=0,sticky=0", seed=1), _make("pong,noops=0,sticky=0", seed=2)
    np.testing.assert_array_equal(a.reset().observation, b.reset().observation)
    assert a.ale.getEpisodeFrameNumber() == 0


def test_noop_starts_are_random_frame_counts_within_noop_max():
    def frame_counts(seed: int, noops: int) -> list[int]:
        env = _make(f"pong,noops={noops},stack=1", seed=seed)
        counts = []
        for _ in range(6):
            env.reset()
            counts.append(env.ale.getEpisodeFrameNumber())
        return counts

    counts = frame_counts(0, 30) + frame_counts(1, 30)
    assert all(1 <= c <= 30 for c in counts)
    assert len(set(counts)) > 3
    assert frame_counts(0, 30) == counts[:6]  # A function of the seed.
    assert set(frame_counts(0, 1)) == {1}


def test_same_seed_replays_the_same_episodes():
    actions = np.random.default_rng(0).integers(0, 6, 300)

    def run(seed: int):
        env = _make("Pong,max_frames=400", seed=seed)  # Several episodes, sticky and no-ops.
        timesteps = [env.step(a) for a in actions]
        assert sum(ts.first() for ts in timesteps) >= 3
        return [ts.observation for ts in timesteps], [ts.reward for ts in timesteps]

    (obs_a, rewards_a), (obs_b, rewards_b), (obs_c, _) = run(3), run(3), run(4)
    assert rewards_a == rewards_b
    assert all(np.array_equal(x, y) for x, y in zip(obs_a, obs_b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(obs_a, obs_c, strict=True))


def test_environments_sharing_step_buffers_see_what_each_sees_alone():
    # Every environment a thread steps shares that thread's screens and resize buffers
    # (`_step_scratch`); stepped in turn, or on two threads at once, each must still make
    # exactly the observations it makes stepped alone.
    import threading

    actions = np.random.default_rng(1).integers(0, 6, 120)
    seeds = [5, 6, 7]

    def alone(seed: int) -> list[np.ndarray]:
        env = _make("Pong,stack=2,max_frames=200", seed=seed)
        return [env.step(a).observation for a in actions]

    expected = [alone(seed) for seed in seeds]
    envs = [_make("Pong,stack=2,max_frames=200", seed=seed) for seed in seeds]
    in_turn: list[list[np.ndarray]] = [[] for _ in seeds]
    for a in actions:
        for env, out in zip(envs, in_turn, strict=True):
            out.append(env.step(a).observation)
    threaded: dict[int, list[np.ndarray]] = {}
    threads = [threading.Thread(target=lambda s=seed: threaded.__setitem__(s, alone(s)))
               for seed in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for i, seed in enumerate(seeds):
        for got in (in_turn[i], threaded[seed]):
            assert all(np.array_equal(x, y) for x, y in zip(got, expected[i], strict=True))
    assert not np.array_equal(expected[0][-1], expected[1][-1])  # They differ at all.


@pytest.mark.parametrize("sticky", [0.0, 0.25, 1.0])
def test_sticky_action_probability_reaches_ale(sticky):
    env = _make(f"pong,sticky={sticky}")
    assert env.ale.getFloat("repeat_action_probability") == sticky
    assert _make("pong").ale.getFloat("repeat_action_probability") == 0.25


def test_sticky_actions_change_what_actions_do():
    def frames(sticky: float, action: int) -> list[np.ndarray]:
        return _frames(_make(f"pong,sticky={sticky},noops=0,stack=1"), [action] * 20)

    # Always sticky: ALE repeats the reset's no-op forever, so the agent's actions are void.
    assert all(np.array_equal(u, d) for u, d in zip(frames(1, _UP), frames(1, _DOWN), strict=True))
    # Never sticky: the same actions replay exactly, and different ones move the paddle.
    up = frames(0, _UP)
    assert all(np.array_equal(x, y) for x, y in zip(up, frames(0, _UP), strict=True))
    assert not np.array_equal(up[-1], frames(0, _DOWN)[-1])


# --- episode ends -------------------------------------------------------------------------


def test_episode_cap_is_a_truncation_at_exactly_max_frames():
    env = _make("pong,max_frames=400,noops=0,repeat=4")
    for _ in range(2):  # The second episode comes from auto-reset after LAST.
        timesteps = [env.step(_UP)]
        assert timesteps[0].first()
        while not timesteps[-1].last():
            timesteps.append(env.step(_UP))
        assert len(timesteps) == 1 + 400 // 4
        assert all(ts.mid() for ts in timesteps[1:-1])
        assert timesteps[-1].discount == 1.0 and timesteps[-1].discount.dtype == np.float32
        assert env.ale.getEpisodeFrameNumber() == 400


def _until_last(env: AtariEnvironment, action: int) -> tuple[dm_env.TimeStep, int]:
    timestep, steps = env.step(action), 1
    while not timestep.last():
        timestep, steps = env.step(action), steps + 1
    return timestep, steps


def test_lost_life_is_terminal_but_the_game_goes_on():
    env = _make("breakout,life_loss=1,noops=0,sticky=0")
    env.reset()
    assert env.ale.lives() == 5
    # Launching the ball and never moving loses a life within a few dozen steps.
    last, steps = _until_last(env, _FIRE)
    assert steps < 100
    assert last.discount == 0.0 and last.discount.dtype == np.float32
    assert env.ale.lives() == 4 and not env.ale.game_over()

    frame_number = env.ale.getEpisodeFrameNumber()
    first = env.reset()
    assert env.ale.getEpisodeFrameNumber() == frame_number  # Continued, not reset.
    for channel in range(4):
        np.testing.assert_array_equal(first.observation[:, :, channel], last.observation[:, :, -1])

    for lives in (3, 2, 1, 0):
        last, _ = _until_last(env, _FIRE)
        assert last.discount == 0.0 and env.ale.lives() == lives
    assert env.ale.game_over()
    env.reset()  # After a game over, a new game.
    assert env.ale.lives() == 5 and env.ale.getEpisodeFrameNumber() == 0


def test_without_life_loss_the_episode_is_the_whole_game():
    env = _make("breakout,noops=0,sticky=0")
    env.reset()
    last, steps = _until_last(env, _FIRE)
    assert env.ale.game_over() and env.ale.lives() == 0
    assert last.discount == 0.0
    assert steps > 5 * 20  # Five lives' worth.


def test_life_discount_cuts_bootstrapping_but_the_episode_is_the_whole_game():
    env = _make("breakout,life_discount=1,noops=0,sticky=0")
    env.reset()
    discounts, lives_after = [], []
    timestep = env.step(_FIRE)
    while not timestep.last():
        assert timestep.mid()
        discounts.append(float(timestep.discount))
        lives_after.append(env.ale.lives())
        timestep = env.step(_FIRE)
    assert env.ale.game_over() and timestep.discount == 0.0
    # Exactly the steps that lost one of the first four lives have discount 0.
    lost = [i for i, d in enumerate(discounts) if d == 0.0]
    assert [lives_after[i] for i in lost] == [4, 3, 2, 1]
    assert all(d == 1.0 for i, d in enumerate(discounts) if i not in lost)


@pytest.mark.parametrize("mode", ["life_discount=1", "life_loss=1", "life_discount=0"])
def test_fire_serves_every_ball_so_a_policy_that_never_fires_still_ends_the_game(mode):
    """fire=1 presses FIRE after each reset and lost life: with NOOPs only, Breakout's five
    balls are served and lost. Without it the ball is never launched and no life is lost."""
    def play_noops(rest: str, max_steps: int = 2_000) -> tuple[int, list[int]]:
        env = _make(rest)
        env.reset()
        lives_at_last = []
        for step in range(1, max_steps + 1):
            if env.step(0).last():
                lives_at_last.append(env.ale.lives())
                if env.ale.game_over():
                    return step, lives_at_last
                env.reset()
        return max_steps, lives_at_last

    steps, lives_at_last = play_noops(f"breakout,{mode},noops=0,sticky=0,fire=1")
    assert steps < 2_000
    assert lives_at_last == ([4, 3, 2, 1, 0] if mode == "life_loss=1" else [0])
    steps, lives_at_last = play_noops(f"breakout,{mode},noops=0,sticky=0", max_steps=500)
    assert steps == 500 and lives_at_last == []


def test_fire_is_refused_for_a_game_without_fire():
    assert parse_atari_id("breakout,fire=1").fire_on_reset
    with pytest.raises(ValueError, match="freeway has no FIRE action"):
        _make("freeway,fire=1")


def test_life_loss_modes_exclude_each_other_and_protocols_name_their_options():
    from seed_agents.envs.atari import protocol_env_id

    with pytest.raises(ValueError, match="exclude each other"):
        parse_atari_id("breakout,life_loss=1,life_discount=1")
    assert protocol_env_id("Pong", "ale_v5") == "atari:Pong"
    config = parse_atari_id(protocol_env_id("Pong", "no_sticky_life_loss")[len("atari:"):])
    assert config.repeat_action_probability == 0.0 and config.discount_on_life_loss
    with pytest.raises(ValueError, match="Unknown Atari protocol 'v4'"):
        protocol_env_id("Pong", "v4")


def test_explicit_reset_mid_episode_starts_a_new_game():
    env = _make("breakout,life_loss=1,noops=0,sticky=0")
    env.reset()
    _until_last(env, _FIRE)
    env.reset()  # Continues the game after the lost life ...
    env.step(_FIRE)
    env.reset()  # ... but a reset in mid-episode starts over.
    assert env.ale.lives() == 5 and env.ale.getEpisodeFrameNumber() == 0


# --- ids and config -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "rest, game",
    [("Pong", "pong"), ("pong", "pong"), ("SpaceInvaders", "space_invaders"),
     ("space_invaders", "space_invaders"), ("MontezumaRevenge", "montezuma_revenge")],
)  # fmt: skip
def test_game_names(rest, game):
    assert parse_atari_id(rest).game == game


def test_id_options_reach_the_config():
    config = parse_atari_id(
        "Pong,sticky=0,noops=0,stack=1,life_loss=1,max_frames=1000,repeat=3,full_actions=1,"
        "max_pool=0"
    )
    assert config == AtariConfig(
        game="pong",
        repeat_action_probability=0.0,
        noop_max=0,
        frame_stack=1,
        terminal_on_life_loss=True,
        max_episode_frames=1000,
        action_repeat=3,
        full_action_set=True,
        max_pool=False,
    )
    assert parse_atari_id("pong") == AtariConfig("pong")


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("atari:", r"must start with a game"),
        ("atari:stack=1", r"must start with a game"),
        ("atari:Pongg", r"Unknown Atari game 'Pongg'.*Did you mean 'pong'"),
        ("atari:pong,foo=1", r"'foo=1'.*valid keys: repeat, max_pool, stack, noops, sticky"),
        ("atari:pong,stack", r"'stack'.*valid keys"),
        ("atari:pong,stack=0", r"frame_stack must be an int >= 1.*valid keys"),
        ("atari:pong,stack=x", r"'stack=x'"),
        ("atari:pong,noops=-1", r"noop_max"),
        ("atari:pong,sticky=1.5", r"repeat_action_probability must be in \[0, 1\]"),
        ("atari:pong,sticky=nan", r"repeat_action_probability"),
        ("atari:pong,repeat=1", r"max_pool needs action_repeat >= 2"),
        ("atari:pong,max_frames=0", r"max_episode_frames"),
        ("atari:pong,life_loss=maybe", r"'life_loss=maybe'.*0, 1, true, false"),
        ("atari:pong,stack=2,stack=3", r"'stack' given twice"),
    ],
)
def test_bad_ids_raise_value_error(env_id, message):
    with pytest.raises(ValueError, match=message):
        environment_factory(env_id)
    with pytest.raises(ValueError, match=message):
        make_environment(env_id)


@pytest.mark.parametrize(
    "kwargs",
    [{"frame_stack": True}, {"noop_max": 1.0}, {"max_pool": 1}, {"game": None},
     {"repeat_action_probability": "0.25"}, {"full_action_set": "yes"}],
)  # fmt: skip
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        AtariConfig(**{"game": "pong", **kwargs})


def test_validation_reads_no_rom(monkeypatch):
    from seed_agents.envs import atari

    def no_rom(name):
        raise AssertionError("validation loaded a ROM")

    monkeypatch.setattr(atari.roms, "get_rom_path", no_rom)
    environment_factory("atari:Breakout,stack=1")


def test_id_factory_pickles_and_builds():
    factory = environment_factory("atari:Pong,stack=1,repeat=2")
    restored = pickle.loads(pickle.dumps(factory))
    assert restored == factory
    np.testing.assert_array_equal(restored(5).reset().observation, factory(5).reset().observation)
