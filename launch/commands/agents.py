"""The agents the command line can name: the nine it ships, those installed packages register,
and any builder named by its import path.

`--agent` takes one of three spellings:

* a shipped agent's name (`vtrace`, `r2d2`, `sac`, `d4pg`, `td3`, `mpo`, `bc`, `cql`,
  `iql`);
* a name an installed package registers under the entry-point group `seed_agents.agents`
  (in its pyproject.toml: `[project.entry-points."seed_agents.agents"] dqn =
  "my_package.dqn:DQNBuilder"`), as pytest and gymnasium take plug-ins;
* `package.module:Builder`, imported as it is written (the current directory is on the
  path, so `examples.dqn:DQNBuilder` works from a checkout).

A builder's config is the dataclass its class names in `config_type`, or else the one its
`__init__` annotates as `config`, or else the builder itself when it is a dataclass of its
settings (as the REINFORCE example's); `--set key=value` overrides that dataclass's fields
(`make_builder`).

A run's record names its builder, but is never imported from: `seed-agents eval` and the
other commands after training rebuild a custom agent only when `--agent` names it (a
logdir may be a bucket that more people can write than may run code here).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import sys
import typing

from launch.commands import Agents

ENTRY_POINT_GROUP = "seed_agents.agents"
"""Where installed packages register builders: name -> "package.module:Builder"."""


def builtin_configs() -> dict[str, type]:
    """name -> config type of the agents seed-agents ships, in `builtin_agents`' order.

    Configs are plain dataclasses that import no TensorFlow: `seed-agents --help` lists
    their fields, and a command line that only parses starts in a fraction of a second.
    """
    from seed_agents.agents.bc.config import BCConfig
    from seed_agents.agents.cql.config import CQLConfig
    from seed_agents.agents.d4pg.config import D4PGConfig
    from seed_agents.agents.iql.config import IQLConfig
    from seed_agents.agents.mpo.config import MPOConfig
    from seed_agents.agents.r2d2.config import R2D2Config
    from seed_agents.agents.sac.config import SACConfig
    from seed_agents.agents.td3.config import TD3Config
    from seed_agents.agents.vtrace.config import VTraceConfig

    return {"vtrace": VTraceConfig, "r2d2": R2D2Config, "sac": SACConfig,
            "d4pg": D4PGConfig, "td3": TD3Config, "mpo": MPOConfig, "bc": BCConfig,
            "cql": CQLConfig, "iql": IQLConfig}


def builtin_agents() -> dict[str, tuple[type, type]]:
    """name -> (builder type, config type) of the agents seed-agents ships. Imports the
    builders, and with them TensorFlow and Reverb."""
    from builders.bc import BCBuilder
    from builders.cql import CQLBuilder
    from builders.d4pg import D4PGBuilder
    from builders.iql import IQLBuilder
    from builders.mpo import MPOBuilder
    from builders.r2d2 import R2D2Builder
    from builders.sac import SACBuilder
    from builders.td3 import TD3Builder
    from builders.vtrace import VTraceBuilder

    builders = {"vtrace": VTraceBuilder, "r2d2": R2D2Builder, "sac": SACBuilder,
                "d4pg": D4PGBuilder, "td3": TD3Builder, "mpo": MPOBuilder, "bc": BCBuilder,
                "cql": CQLBuilder, "iql": IQLBuilder}
    return {name: (builders[name], config) for name, config in builtin_configs().items()}


def registered_agents() -> dict[str, str]:
    """name -> "package.module:Builder" of the installed packages' entry points."""
    return {entry.name: entry.value
            for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve_agent(name: str, builtins: Agents | None = None) -> tuple[type, type]:
    """(builder type, config type) of `--agent name`.

    Raises:
      ValueError: naming what went wrong: a name nothing knows, a module that does not
        import, a missing attribute, a class that is not a builder or has no config
        dataclass.
    """
    builtins = builtin_agents() if builtins is None else builtins
    if name in builtins:
        return builtins[name]
    registered = registered_agents()
    if name in registered:
        return _load(registered[name], f"entry point {name!r} ({ENTRY_POINT_GROUP})")
    if ":" in name:
        return _load(name, repr(name))
    raise ValueError(
        f"Unknown agent {name!r}: name one of {', '.join(sorted({*builtins, *registered}))}, "
        "an installed plug-in's name (entry-point group "
        f"{ENTRY_POINT_GROUP!r}) or a builder's import path, package.module:Builder.")


def agent_table(name: str | None = None) -> dict[str, tuple[type, type]]:
    """The shipped agents, plus `name` resolved when it is not one of them (what the
    commands after training rebuild a run's builder from)."""
    table = builtin_agents()
    if name is not None and name not in table:
        table[name] = resolve_agent(name, table)
    return table


def _load(path: str, what: str) -> tuple[type, type]:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"Agent {what}: expected package.module:Builder, got {path!r}.")
    if os.curdir not in sys.path and "" not in sys.path:
        # A console script's path lacks the working directory that `python -m` puts first.
        sys.path.append(os.curdir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"Agent {what}: module {module_name!r} does not import: "
                         f"{error}.") from None
    except TypeError as error:
        frozen = _unfrozen_config(error)
        if frozen is None:
            raise
        raise ValueError(
            f"Agent {what}: module {module_name!r} does not import: its dataclass "
            f"{frozen} extends a frozen config, and seed-agents' configs are frozen "
            "(immutable, so a run's settings cannot change under it): declare it "
            "@dataclasses.dataclass(frozen=True).") from error
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"Agent {what}: module {module_name!r} has no {attribute!r}.")
        target = getattr(target, part)
    if not isinstance(target, type) or not _is_builder(target):
        raise ValueError(f"Agent {what}: {path} is not an agent builder class (one with "
                         "make_networks, make_learner and make_policy, as "
                         "builders.base.AgentBuilder).")
    return target, config_type_of(target)


def _unfrozen_config(error: TypeError) -> str | None:
    """The class a `cannot inherit non-frozen dataclass from a frozen one` error was
    raised for (Python's message names none), or None for any other TypeError."""
    if "non-frozen dataclass from a frozen one" not in str(error):
        return None
    traceback = error.__traceback__
    name = "(a class)"
    while traceback is not None:
        cls = traceback.tb_frame.f_locals.get("cls")
        if isinstance(cls, type) and traceback.tb_frame.f_code.co_name == "_process_class":
            name = f"{cls.__module__}.{cls.__qualname__}"
        traceback = traceback.tb_next
    return name


def _hints(target: object) -> dict[str, object]:
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve names nothing
        return {}


def _is_builder(cls: type) -> bool:
    from builders.base import AgentBuilder

    if issubclass(cls, AgentBuilder):
        return True
    return all(callable(getattr(cls, name, None))
               for name in ("make_networks", "make_learner", "make_policy"))


def make_builder(builder_type: type, config_type: type, config: object) -> object:
    """The builder of `config` (an instance of `config_type`, `config_type_of`'s)."""
    return config if config_type is builder_type else builder_type(config)


def config_type_of(builder_type: type) -> type:
    """The config dataclass of `builder_type`: its `config_type` attribute, the
    annotation of its `__init__`'s `config` parameter, or the builder itself when it is a
    dataclass without a `config` parameter.

    Raises:
      ValueError: When none of these is a dataclass.
    """
    declared = getattr(builder_type, "config_type", None)
    if declared is None:
        declared = _hints(builder_type.__init__).get("config")
    if declared is None and dataclasses.is_dataclass(builder_type):
        fields = {f.name for f in dataclasses.fields(builder_type)}
        # A dataclass builder holds its config in a `config` field (VTraceBuilder), or is
        # itself the dataclass of its settings.
        declared = _hints(builder_type).get("config") if "config" in fields else builder_type
    if not (isinstance(declared, type) and dataclasses.is_dataclass(declared)):
        raise ValueError(
            f"{builder_type.__module__}.{builder_type.__qualname__} names no config "
            "dataclass: set `config_type = MyConfig` on the class, annotate "
            "`__init__(self, config: MyConfig)`, or make the builder a dataclass of its "
            "settings.")
    return declared
