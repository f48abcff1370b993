"""What the inference server (and a local actor) hands each batch of rows to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np


class Adder(Protocol):
    """Turns rows of many environments into replay items.

    `add(slots, rows, states)` takes one row per slot (the layout of
    `seed_agents.replay.unrolls.row_spec`, arrays with a leading axis of len(slots)) and
    the policy state fed in with them; `reset(slots)` discards what those environments
    had pending, which is then never written. `UnrollAdder` (unrolls and sequences) and
    `NStepTransitionAdder` (n-step transitions) are the two kinds. Their `close()` (an
    adder without one needs none) ends the writer's stream while the server is up: a
    Reverb writer left to the garbage collector after its server stopped blocks the
    collection for ~30 s in its destructor (measured).
    """

    def add(self, slots: np.ndarray, rows: Mapping[str, Any], states: Any = ()) -> None: ...

    def reset(self, slots: np.ndarray) -> None: ...
