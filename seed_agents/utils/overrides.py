"""Configs from `key=value` strings: what `seed-agents train --set` and the presets use."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any


def parse_overrides(config_type: type, overrides: Sequence[str]) -> Any:
    """Builds `config_type` from `key=value` strings; values are Python literals.

    `learning_rate=3e-4`, `hidden_sizes=128,128`, `lstm_size=None`; a value that is not a
    literal is kept as a string. Unknown keys and invalid values fail with the field list.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(config_type)}
    fields = set(defaults)
    values: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--set takes key=value, got {item!r}.")
        if key not in fields:
            raise ValueError(
                f"{config_type.__name__} has no field {key!r}; fields: {', '.join(sorted(fields))}."
            )
        try:
            values[key] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            values[key] = raw.strip()
        values[key] = _checked(key, values[key], defaults[key])
    try:
        return config_type(**values)
    except TypeError as error:  # a value of the wrong kind met a check of the config's
        raise ValueError(f"--set {', '.join(overrides)}: a value of the wrong kind "
                         f"({error}).") from None


def _checked(key: str, value: Any, default: Any) -> Any:
    """`value` for a field whose default is `default`: a number's or a flag's field
    refuses a string (`learning_rate=abc`), which would otherwise fail later with a
    confusing comparison of a str and a number; a flag takes 1 and 0 as True and False."""
    if isinstance(default, bool):
        if value in (0, 1) and not isinstance(value, float | str):
            return bool(value)
        raise ValueError(f"--set {key} takes True or False, got {value!r}.")
    if isinstance(default, int | float) and isinstance(value, str):
        raise ValueError(f"--set {key} takes a number, got {value!r}.")
    return value
