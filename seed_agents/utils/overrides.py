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
    fields = {f.name for f in dataclasses.fields(config_type)}
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
    return config_type(**values)
