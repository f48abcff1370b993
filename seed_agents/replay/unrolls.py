"""Fixed-length unrolls: their layout, how they are assembled, and how they reach Reverb.

An unroll of length T holds T+1 consecutive rows of one environment; the last row of an
unroll is the first row of the next (one step of overlap), so the learner can bootstrap
from it. Row t holds what was known when the policy acted at step t::

    observation_t, reward_t, discount_t, step_type_t   # the timestep that arrived
    prev_action_t                                      # the action that led to it
    action_t, extras_t                                 # what the policy answered

so the reward and discount of the transition t -> t+1 sit in row t+1. Unrolls run across
episode boundaries: a LAST row (whose action is never executed) is followed by the FIRST
row of the next episode, and learners mask that non-transition out. Recurrent agents also
store `start_state`, the policy state that was fed in at row 0.

Assembly happens in preallocated numpy buffers for many environments at once (one array
operation per batch, not a Python loop over environments), and each full unroll is
written to Reverb as a single step of [T+1, ...] arrays with one item: one append per env
step costs a core at ~47K steps/s, one per unroll is ~4x cheaper (MEASUREMENTS.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import reverb
import tensorflow as tf
import tree
from dm_env import specs

from seed_agents.specs import EnvironmentSpec

OBSERVATION = "observation"
ACTION = "action"
PREV_ACTION = "prev_action"
REWARD = "reward"
DISCOUNT = "discount"
STEP_TYPE = "step_type"
EXTRAS = "extras"
START_STATE = "start_state"


def row_spec(env_spec: EnvironmentSpec, extras_spec: Mapping[str, specs.Array]) -> dict[str, Any]:
    """The spec of one row: what the actor saw and what the policy answered."""
    return {
        OBSERVATION: env_spec.observations,
        PREV_ACTION: specs.Array(env_spec.actions.shape, env_spec.actions.dtype),
        ACTION: specs.Array(env_spec.actions.shape, env_spec.actions.dtype),
        REWARD: specs.Array((), np.float32),
        DISCOUNT: specs.Array((), np.float32),
        STEP_TYPE: specs.Array((), np.uint8),
        EXTRAS: dict(extras_spec),
    }


def unroll_signature(
    env_spec: EnvironmentSpec,
    unroll_length: int,
    extras_spec: Mapping[str, specs.Array],
    state_spec: Any = (),
) -> dict[str, Any]:
    """The Reverb table signature of an unroll: every row field gains a [T+1] time axis."""
    rows = tree.map_structure(
        lambda s: tf.TensorSpec((unroll_length + 1, *s.shape), tf.as_dtype(s.dtype)),
        row_spec(env_spec, extras_spec),
    )
    if tree.flatten(state_spec):
        rows[START_STATE] = tree.map_structure(
            lambda s: tf.TensorSpec(s.shape, tf.as_dtype(s.dtype)), state_spec
        )
    return rows


class ReplayTimeoutError(TimeoutError):
    """Reverb did not confirm writes in time: the server is gone or nobody consumes."""


class UnrollWriter:
    """Writes whole unrolls to one Reverb table, one item per unroll.

    `write` does not block while fewer than `max_in_flight_items` items are unconfirmed;
    beyond that it waits for the server, which is where a full queue's back-pressure
    reaches the caller. The wait is polled in short slices so that setting `stop_event`
    abandons it (the item in flight may then be lost: the program is stopping), and it
    raises `ReplayTimeoutError` after `timeout_s`, so a dead server never hangs a caller.
    The default is long because a full queue also waits for a live learner's first step,
    which traces its graph: on a CPU shared with other work that took over 120 s here.
    Not thread-safe: one writer per thread.
    """

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        max_in_flight_items: int = 4,
        timeout_s: float = 600.0,
        stop_event: threading.Event | None = None,
        priority_fn: Callable[[Mapping[str, np.ndarray]], float] | None = None,
    ):
        if max_in_flight_items < 1:
            raise ValueError(f"max_in_flight_items must be >= 1, got {max_in_flight_items}.")
        self._writer = client.trajectory_writer(num_keep_alive_refs=1)
        self._table = table
        self._max_in_flight = max_in_flight_items
        self._timeout_s = timeout_s
        self._stop_event = stop_event or threading.Event()
        self._priority_fn = priority_fn
        self._closed = False

    def write(self, unroll: Mapping[str, Any]) -> None:
        """Appends `unroll` as one step and inserts it as one item (Reverb copies it)."""
        self._writer.append(unroll)
        trajectory = tree.map_structure(lambda column: column[-1], self._writer.history)
        priority = 1.0 if self._priority_fn is None else float(self._priority_fn(unroll))
        self._writer.create_item(self._table, priority, trajectory)
        self._flush(self._max_in_flight)

    def flush(self) -> None:
        """Blocks until every written item is confirmed (or stop/timeout, as for `write`)."""
        self._flush(0)

    def _flush(self, block_until_num_items: int) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                self._writer.flush(block_until_num_items, timeout_ms=100)
                return
            except reverb.errors.DeadlineExceededError:
                if self._stop_event.is_set():
                    return
                if time.monotonic() > deadline:
                    raise ReplayTimeoutError(
                        f"Reverb table {self._table!r} confirmed no write for "
                        f"{self._timeout_s:.0f}s: is the server up and is a learner sampling?"
                    ) from None

    def close(self) -> None:
        """Ends the writer's stream; items not yet confirmed may be lost (`flush` first to
        keep them). Idempotent. dm-reverb 0.14's `TrajectoryWriter.close` takes no
        arguments."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()


def nothing_to_flush() -> None:
    """The `flush` (and `close`) of an adder whose sink writes at once (a plain
    callable)."""


class UnrollAdder:
    """Assembles unrolls for `num_slots` environments at once and writes the full ones.

    `add` takes one row for each of a batch of slots (arrays with a leading batch axis).
    Each slot fills its buffer of T+1 rows; when full, the unroll goes to `sink` (an
    `UnrollWriter`, or any callable taking the unroll dict), and the next unroll starts
    `period` rows later: its first T+1-period rows are the last ones of this unroll. The
    default period T overlaps one row (V-trace's bootstrap row); R2D2 overlaps half its
    sequences. `reset(slots)` discards partial unrolls, e.g. of a runner that
    disconnected: they are never written. `flush()` blocks until the sink's written
    unrolls are confirmed; `close()` ends the sink's stream (before its server stops).
    """

    def __init__(
        self,
        sink: UnrollWriter | Callable[[dict[str, Any]], None],
        num_slots: int,
        unroll_length: int,
        row_spec: Mapping[str, Any],
        state_spec: Any = (),
        period: int | None = None,
    ):
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}.")
        period = unroll_length if period is None else period
        if not 1 <= period <= unroll_length:
            raise ValueError(f"period must be in [1, unroll_length={unroll_length}], got {period}.")
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}.")
        self._write = sink.write if isinstance(sink, UnrollWriter) else sink
        self.flush = getattr(sink, "flush", nothing_to_flush)
        self.close = getattr(sink, "close", nothing_to_flush)
        self._length = unroll_length + 1
        self._period = period
        self._overlap = self._length - period
        self._recurrent = bool(tree.flatten(state_spec))
        self._rows = tree.map_structure(
            lambda s: np.zeros((num_slots, self._length, *s.shape), s.dtype), dict(row_spec)
        )
        self._row_leaves = tree.flatten(self._rows)
        self._row_structure = dict(row_spec)
        if self._recurrent:
            # The state fed in with each row, carried over with the rows: the state of
            # the row that becomes a sequence's row 0 is that sequence's start state.
            self._states = tree.map_structure(
                lambda s: np.zeros((num_slots, self._length, *s.shape), s.dtype), state_spec
            )
            self._state_leaves = tree.flatten(self._states)
        self._position = np.zeros(num_slots, np.int64)
        self.unrolls_written = 0

    def add(self, slots: np.ndarray, rows: Mapping[str, Any], states: Any = ()) -> None:
        """Adds one row for each slot in `slots` (distinct ids); writes completed unrolls.

        `rows` has the structure of the row spec with a leading axis of len(slots);
        `states` (recurrent agents) is the policy state fed in for these rows.
        """
        position = self._position[slots]
        tree.assert_same_structure(self._row_structure, dict(rows))
        for buffer, values in zip(self._row_leaves, tree.flatten(rows), strict=True):
            buffer[slots, position] = values
        if self._recurrent:
            for buffer, state in zip(self._state_leaves, tree.flatten(states), strict=True):
                buffer[slots, position] = state
        position += 1
        self._position[slots] = position
        full = slots[position == self._length]
        for slot in full:
            self._write(self._unroll(slot))
            self.unrolls_written += 1
        if full.size:
            keep = self._overlap
            for buffer in self._row_leaves + (self._state_leaves if self._recurrent else []):
                buffer[full, :keep] = buffer[full, self._period:]
            self._position[full] = keep

    def reset(self, slots: np.ndarray) -> None:
        """Discards the partial unrolls of `slots`; their next row starts a new unroll."""
        self._position[slots] = 0

    def _unroll(self, slot: int) -> dict[str, Any]:
        unroll = tree.map_structure(lambda buffer: buffer[slot], self._rows)
        if self._recurrent:
            unroll[START_STATE] = tree.map_structure(lambda s: s[slot, 0], self._states)
        return unroll
