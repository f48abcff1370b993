"""String ids for environments, and factories that build them in any process.

An id is `<prefix>:<rest>`; the prefix picks a registered builder and the rest is that
builder's business. Built in are

* `gym:<gymnasium id>`, e.g. `gym:CartPole-v1`;
* `fake[:key=value,...]`, e.g. `fake:obs=84x84x4,dtype=uint8,actions=6` (see `_FAKE_OPTIONS`);
* `atari:<game>[,key=value,...]`, e.g. `atari:Pong` or `atari:breakout,life_loss=1`, with keys
  repeat, max_pool, stack, noops, sticky, life_loss, max_frames, full_actions (see
  `seed_agents.envs.atari`; ale-py is imported only when such an id is used);
* `mask:<flat indices>:<id>`, e.g. `mask:1,3:gym:CartPole-v1`: the inner environment with
  those observation entries zeroed (see `seed_agents.envs.masked`);
* `dmc:<domain>-<task>[,repeat=N]`, e.g. `dmc:walker-walk`: the DeepMind Control Suite with
  flat float32 observations, each action held for N control steps with `repeat=N` (see
  `seed_agents.envs.dmc`; dm_control is imported on first use);
* `minatar:<game>[,key=value,...]`, e.g. `minatar:breakout`: MinAtar's 10x10 Atari analogues
  (see `seed_agents.envs.minatar`; the optional `minatar` package is imported on first use).

Continuous actions are presented in [-1, 1] (`seed_agents.envs.action_scaling`) by every
built-in prefix: `gym:HalfCheetah-v5` and `gym:Pendulum-v1` as much as `dmc:` tasks.

Other prefixes are added with `register`.

Ids exist because actors run in other processes: a string (wrapped in a small frozen
dataclass) pickles anywhere, while an environment object usually does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import dm_env
import gymnasium

from seed_agents.envs.action_scaling import CanonicalActions, needs_canonical_actions
from seed_agents.envs.canonical import CanonicalFactory, canonical_environment
from seed_agents.envs.fake import FakeEnvironment, validate_fake_arguments
from seed_agents.envs.gym_adapter import GymToDmEnv
from seed_agents.envs.masked import MaskedObservation, parse_mask_id
from seed_agents.envs.options import parse_bool, parse_options

EnvironmentFactory = Callable[[int], dm_env.Environment]
"""Builds an environment from a seed; each actor calls it with its own seed."""

PrefixFactory = Callable[[str, int | None], dm_env.Environment]
"""Builds an environment from the part of an id after `prefix:`, and a seed."""

PrefixValidator = Callable[[str], None]
"""Raises `ValueError` if the part of an id after `prefix:` cannot be built."""


@dataclasses.dataclass(frozen=True)
class _Builder:
    factory: PrefixFactory
    validate: PrefixValidator | None


_BUILDERS: dict[str, _Builder] = {}


def register(
    prefix: str,
    factory: PrefixFactory,
    *,
    overwrite: bool = False,
    validate: PrefixValidator | None = None,
) -> None:
    """Makes ids `<prefix>:<rest>` build environments with `factory(rest, seed)`.

    Registration is per process. A factory made from an id is rebuilt in another process
    by re-reading the id there, so a custom prefix must also be registered in that process
    (registering at import time of the module that defines it does this).

    Args:
      prefix: The prefix, with or without its trailing colon (`"myenv"` or `"myenv:"`).
      factory: Called with the rest of the id and the seed (possibly None).
      overwrite: Replace an existing registration instead of raising.
      validate: Optional check of the rest of an id, run when a factory is made from the
        id, so that a typo fails in the launching process rather than in every actor.

    Raises:
      ValueError: If the prefix is empty, contains a colon, or is taken and not `overwrite`.
    """
    name = prefix[:-1] if prefix.endswith(":") else prefix
    if not name or ":" in name:
        raise ValueError(f"An environment prefix must be non-empty with no ':', got {prefix!r}.")
    if name in _BUILDERS and not overwrite:
        raise ValueError(
            f"Environment prefix {name!r} is already registered; pass overwrite=True to replace it."
        )
    _BUILDERS[name] = _Builder(factory=factory, validate=validate)


def _lookup(env_id: str) -> tuple[_Builder, str]:
    if not isinstance(env_id, str):
        raise TypeError(f"An environment id must be a str, got {env_id!r}.")
    prefix, _, rest = env_id.partition(":")
    builder = _BUILDERS.get(prefix)
    if builder is None:
        hint = f" Did you mean 'gym:{env_id}'?" if env_id in gymnasium.registry else ""
        raise ValueError(
            f"Unknown environment prefix {prefix!r} in id {env_id!r}; "
            f"known prefixes: {', '.join(sorted(_BUILDERS))}.{hint}"
        )
    return builder, rest


def make_environment(env_id: str, seed: int | None = None) -> dm_env.Environment:
    """Builds the environment named by `env_id`, e.g. `"gym:CartPole-v1"` or `"fake:len=10"`,
    in the toolkit's dtypes (a prefix `register`ed by a user passes the same edge as a
    factory's environments: `seed_agents.envs.canonical`)."""
    builder, rest = _lookup(env_id)
    return canonical_environment(builder.factory(rest, seed))


def validate_environment_id(env_id: str) -> None:
    """Raises `ValueError` unless `env_id` names a known prefix whose options parse."""
    builder, rest = _lookup(env_id)
    if builder.validate is not None:
        builder.validate(rest)


def split_frame_stack(env_id: str) -> tuple[str, int]:
    """(the id of the same environment making single frames, the frames its observations
    stack along their last axis) for an id that can make them (`atari:` with stack > 1);
    (env_id, 1) for any other. Lets the inference server stack the frames instead
    (`InferenceConfig.frame_stack`), so that runners send a quarter of the bytes."""
    prefix, _, rest = env_id.partition(":")
    if prefix.strip() == "atari":
        from seed_agents.envs import atari

        single, depth = atari.single_frame_id(rest)
        if depth > 1:
            return f"atari:{single}", depth
    return env_id, 1


@dataclasses.dataclass(frozen=True)
class EnvironmentIdFactory:
    """A picklable `EnvironmentFactory` for an environment id.

    Only the id string is stored, so pickling never touches an environment; the id is
    checked on construction in the creating process and resolved again on each call.
    """

    env_id: str

    def __post_init__(self) -> None:
        validate_environment_id(self.env_id)

    def __call__(self, seed: int) -> dm_env.Environment:
        return make_environment(self.env_id, seed)


def environment_factory(env: str | EnvironmentFactory) -> EnvironmentFactory:
    """Turns an id into a picklable factory; a callable into one whose environments are
    in the toolkit's dtypes.

    A callable is how any user `dm_env.Environment` plugs in: `lambda seed: MyEnv(seed)`.
    Its environments are taken as they are and converted at the edge
    (`seed_agents.envs.canonical`: int64 discrete actions, float64 action vectors and
    observations, ...). It must itself pickle if it is to reach other processes (a
    module-level function or `functools.partial` does; a lambda does not).

    Raises:
      ValueError: If `env` is an id that does not parse.
      TypeError: If `env` is neither a string nor callable.
    """
    if isinstance(env, str):
        return EnvironmentIdFactory(env)
    if isinstance(env, CanonicalFactory):
        return env
    if callable(env):
        return CanonicalFactory(env)
    raise TypeError(f"Expected an environment id or a callable taking a seed, got {env!r}.")


# --- gym: -------------------------------------------------------------------------------


def _validate_gym(gym_id: str) -> None:
    if not gym_id:
        raise ValueError("The 'gym:' prefix needs a gymnasium id, e.g. 'gym:CartPole-v1'.")
    if ":" in gym_id:
        # `module:EnvName` ids register themselves when gymnasium imports the module at
        # `make` time, so they cannot be checked before then.
        return
    try:
        gymnasium.spec(gym_id)
    except gymnasium.error.Error as e:
        raise ValueError(f"Bad environment id 'gym:{gym_id}': {e}") from None


def _make_gym(gym_id: str, seed: int | None) -> dm_env.Environment:
    _validate_gym(gym_id)
    # gymnasium's own wrappers (TimeLimit included) stay on: CartPole-v1 truncates at 500.
    # The passive checker validates the first steps only but stays a wrapper layer on
    # every step of a hot loop; the adapter checks spaces itself.
    env = GymToDmEnv(gymnasium.make(gym_id, disable_env_checker=True), seed=seed)
    return CanonicalActions(env) if needs_canonical_actions(env.action_spec()) else env


# --- fake: ------------------------------------------------------------------------------


def _parse_shape(value: str) -> tuple[int, ...]:
    return tuple(int(d) for d in value.split("x"))


# id key -> (FakeEnvironment argument, parser of the value string)
_FAKE_OPTIONS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "obs": ("observation_shape", _parse_shape),
    "dtype": ("observation_dtype", str),
    "actions": ("num_actions", int),
    "len": ("episode_length", int),
    "cost_us": ("step_cost_us", float),
    "terminate": ("terminate", parse_bool),
}
_FAKE_USAGE = (
    f"valid keys: {', '.join(_FAKE_OPTIONS)} "
    "(e.g. 'fake:obs=84x84x4,dtype=uint8,actions=6,len=1000,cost_us=50,terminate=1')"
)


def _parse_fake(options: str) -> dict[str, Any]:
    return parse_options(options, _FAKE_OPTIONS, f"fake:{options}", _FAKE_USAGE,
                         lambda name, value: validate_fake_arguments(**{name: value})[name])


def _validate_fake(options: str) -> None:
    _parse_fake(options)


def _make_fake(options: str, seed: int | None) -> dm_env.Environment:
    return FakeEnvironment(seed=seed, **_parse_fake(options))


register("gym", _make_gym, validate=_validate_gym)
register("fake", _make_fake, validate=_validate_fake)


# --- atari: -----------------------------------------------------------------------------
# The module is imported on first use, so that processes without Atari never load ale-py.


def _validate_atari(rest: str) -> None:
    from seed_agents.envs import atari

    atari.parse_atari_id(rest)


def _make_atari(rest: str, seed: int | None) -> dm_env.Environment:
    from seed_agents.envs import atari

    return atari.make_atari(rest, seed)


# --- mask: ------------------------------------------------------------------------------


def _validate_mask(rest: str) -> None:
    _, inner_id = parse_mask_id(rest)
    try:
        validate_environment_id(inner_id)
    except ValueError as e:
        raise ValueError(f"Bad inner id in 'mask:{rest}': {e}") from None


def _make_mask(rest: str, seed: int | None) -> dm_env.Environment:
    _validate_mask(rest)  # So that a bad inner id reads the same from here as from a factory.
    indices, inner_id = parse_mask_id(rest)
    return MaskedObservation(make_environment(inner_id, seed), indices)


register("atari", _make_atari, validate=_validate_atari)
register("mask", _make_mask, validate=_validate_mask)


# --- dmc: -------------------------------------------------------------------------------


def _validate_dmc(rest: str) -> None:
    from seed_agents.envs import dmc

    dmc.parse_dmc_id(rest)


def _make_dmc(rest: str, seed: int | None) -> dm_env.Environment:
    from seed_agents.envs import dmc

    return dmc.make_dmc(rest, seed)


register("dmc", _make_dmc, validate=_validate_dmc)


# --- minatar: ---------------------------------------------------------------------------


def _validate_minatar(rest: str) -> None:
    import importlib.util

    from seed_agents.envs import minatar

    minatar.parse_minatar_id(rest)
    # Looked up, not imported: the package loads matplotlib and seaborn (~2 s).
    if importlib.util.find_spec("minatar") is None:
        raise ValueError(f"'minatar:{rest}' needs the minatar package. {minatar.INSTALL_HINT}")


def _make_minatar(rest: str, seed: int | None) -> dm_env.Environment:
    from seed_agents.envs import minatar

    return minatar.make_minatar(rest, seed)


register("minatar", _make_minatar, validate=_validate_minatar)
