"""Parsing the `key=value,...` options of environment ids (`fake:`, `atari:`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

OptionTable = Mapping[str, tuple[str, Callable[[str], Any]]]
"""id key -> (argument name, parser of the value string)."""


def parse_bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true"):
        return True
    if lowered in ("0", "false"):
        return False
    raise ValueError(f"expected one of 0, 1, true, false, got {value!r}")


def parse_options(options: str, table: OptionTable, env_id: str, usage: str,
                  check: Callable[[str, Any], Any] | None = None) -> dict[str, Any]:
    """Arguments from `options` ("k=v,k=v"), by `table`; errors name `env_id` and `usage`.

    An empty item (a trailing comma) is tolerated; an unknown or repeated key or a value
    that does not parse (or that `check(name, value)` rejects) raises ValueError.
    """
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in options.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in table:
            raise ValueError(f"Bad option {part!r} in '{env_id}'; {usage}.")
        name, parse = table[key]
        if name in kwargs:
            raise ValueError(f"Option {key!r} given twice in '{env_id}'.")
        try:
            parsed = parse(value)
            kwargs[name] = check(name, parsed) if check is not None else parsed
        except ValueError as e:
            raise ValueError(f"Bad value in option {part!r} of '{env_id}': {e}; {usage}.") from None
    return kwargs
