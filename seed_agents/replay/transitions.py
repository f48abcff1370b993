"""N-step transitions: what off-policy learners of continuous control (SAC, D4PG) replay.

For every step t at which an action was taken, the adder emits one transition::

    observation      o_t
    action           a_t
    reward           R   = r_{t+1} + g d_{t+1} r_{t+2} + ... (m terms, g = gamma)
    discount         D   = prod_{k=1..m} g d_{t+k}
    next_observation o_{t+m}
    extras           the policy's extras at t

where r_{t+k} and d_{t+k} arrive with the timestep after a_{t+k-1}, and m = n unless the
episode ends first, in which case the window stops at its LAST step:

    t:        0     1     2     3 (LAST)         n = 3
    windows:  [0 -> 3]  [1 -> 3]  [2 -> 3]       m = 3, 2, 1

* termination (LAST with discount 0): D = 0, and `next_observation` is the final one,
  which the learner never bootstraps from;
* truncation by a time limit (LAST with discount 1): D = g^m and the final observation is
  kept, so the learner bootstraps from it: a cut episode is not a failure.

The adder takes the rows the central inference server assembles (see
`seed_agents.replay.unrolls`: row t holds o_t, the reward and discount that came with it,
its step type and a_t) for many environments at once, and keeps, per environment, a ring
of the last n steps with their partial sums: each `add` is a few array operations over the
batch, not a Python loop over environments. Every transition goes to the sink as one
Reverb item (a few dozen floats for MuJoCo tasks: nothing to share between items).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tree
from dm_env import specs

from seed_agents.replay import unrolls
from seed_agents.specs import EnvironmentSpec

OBSERVATION = "observation"
ACTION = "action"
REWARD = "reward"
DISCOUNT = "discount"
NEXT_OBSERVATION = "next_observation"
EXTRAS = "extras"

_FIRST, _LAST = 0, 2


def transition_spec(env_spec: EnvironmentSpec,
                    extras_spec: Mapping[str, specs.Array]) -> dict[str, Any]:
    """The spec of one transition."""
    return {
        OBSERVATION: env_spec.observations,
        ACTION: specs.Array(env_spec.actions.shape, env_spec.actions.dtype),
        REWARD: specs.Array((), np.float32),
        DISCOUNT: specs.Array((), np.float32),
        NEXT_OBSERVATION: env_spec.observations,
        EXTRAS: dict(extras_spec),
    }


def transition_signature(env_spec: EnvironmentSpec,
                         extras_spec: Mapping[str, specs.Array]) -> dict[str, Any]:
    """The Reverb table signature of a transition (no time axis: one step per item)."""
    return tree.map_structure(lambda s: tf.TensorSpec(s.shape, tf.as_dtype(s.dtype)),
                              transition_spec(env_spec, extras_spec))


class NStepTransitionAdder:
    """Turns rows of many environments into n-step transitions, written one per item.

    `add(slots, rows)` takes one row per slot (arrays with a leading axis of len(slots),
    the structure of `unrolls.row_spec`); transitions whose window closed with it go to
    `sink` (an `UnrollWriter`, which writes any dict as one item, or any callable taking
    the transition dict) in step order per environment. `reset(slots)` forgets the
    environments' pending steps (e.g. of a runner that disconnected): they are never
    written. A FIRST row does the same for its environment. `flush()` blocks until the
    sink's written transitions are confirmed. Not thread-safe: the
    inference server calls it from its batcher thread only.
    """

    def __init__(
        self,
        sink: unrolls.UnrollWriter | Callable[[dict[str, Any]], None],
        num_slots: int,
        n_step: int,
        discount: float,
        row_spec: Mapping[str, Any],
    ):
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}.")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {discount}.")
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}.")
        self._write = sink.write if isinstance(sink, unrolls.UnrollWriter) else sink
        self.flush = getattr(sink, "flush", unrolls.nothing_to_flush)
        self.close = getattr(sink, "close", unrolls.nothing_to_flush)
        self._n = n_step
        self._gamma = np.float64(discount)
        row_spec = dict(row_spec)

        def ring(spec: specs.Array) -> np.ndarray:
            return np.zeros((num_slots, n_step, *spec.shape), spec.dtype)

        self._observations = ring(row_spec[unrolls.OBSERVATION])
        self._actions = ring(row_spec[unrolls.ACTION])
        self._extras_structure = dict(row_spec[unrolls.EXTRAS])
        self._extras = [ring(s) for s in tree.flatten(self._extras_structure)]
        # Partial sums in float64: n terms of float32 rewards lose nothing on the way.
        self._returns = np.zeros((num_slots, n_step), np.float64)
        self._discounts = np.ones((num_slots, n_step), np.float64)
        self._ages = np.zeros((num_slots, n_step), np.int64)
        self._pending = np.zeros((num_slots, n_step), bool)
        self._steps = np.zeros(num_slots, np.int64)  # steps taken in the episode so far
        self.transitions_written = 0

    def reset(self, slots: np.ndarray) -> None:
        """Forgets the pending steps of `slots`; their next row starts afresh."""
        self._pending[slots] = False
        self._steps[slots] = 0

    def add(self, slots: np.ndarray, rows: Mapping[str, Any], states: Any = ()) -> None:
        """Adds one row per slot in `slots` (distinct ids) and writes the transitions
        that this row completes. `states` is accepted for the adder interface and unused:
        transitions are for feed-forward learners."""
        del states
        step_type = np.asarray(rows[unrolls.STEP_TYPE])
        first = step_type == _FIRST
        last = step_type == _LAST
        if first.any():
            self.reset(slots[first])

        # Every pending step of these environments gains this row's reward and discount.
        pending = self._pending[slots]
        returns, discounts = self._returns[slots], self._discounts[slots]
        reward = np.asarray(rows[unrolls.REWARD], np.float64)[:, None]
        discount = np.asarray(rows[unrolls.DISCOUNT], np.float64)[:, None]
        returns = np.where(pending, returns + discounts * reward, returns)
        discounts = np.where(pending, discounts * self._gamma * discount, discounts)
        ages = np.where(pending, self._ages[slots] + 1, 0)
        self._returns[slots], self._discounts[slots], self._ages[slots] = (
            returns, discounts, ages)

        done = pending & ((ages >= self._n) | last[:, None])
        if done.any():
            self._emit(slots, done, rows[unrolls.OBSERVATION])
            self._pending[slots] = pending & ~done

        # This row's own step starts its window, unless the episode has ended (a LAST
        # row's action is never executed). Its ring position was freed just above: the
        # step n rows ago sat there and has been emitted.
        acts = ~last
        if acts.any():
            where = slots[acts]
            position = self._steps[where] % self._n
            self._observations[where, position] = np.asarray(rows[unrolls.OBSERVATION])[acts]
            self._actions[where, position] = np.asarray(rows[unrolls.ACTION])[acts]
            for ring, values in zip(self._extras, tree.flatten(rows[unrolls.EXTRAS]),
                                    strict=True):
                ring[where, position] = np.asarray(values)[acts]
            self._returns[where, position] = 0.0
            self._discounts[where, position] = 1.0
            self._ages[where, position] = 0
            self._pending[where, position] = True
            self._steps[where] += 1

    def _emit(self, slots: np.ndarray, done: np.ndarray, observation: np.ndarray) -> None:
        rows_i, positions = np.nonzero(done)
        # Oldest first within an environment: the order the steps were taken in.
        order = np.lexsort((-self._ages[slots[rows_i], positions], rows_i))
        rows_i, positions = rows_i[order], positions[order]
        where = slots[rows_i]
        observation = np.asarray(observation)
        batch = {
            OBSERVATION: self._observations[where, positions],
            ACTION: self._actions[where, positions],
            REWARD: self._returns[where, positions].astype(np.float32),
            DISCOUNT: self._discounts[where, positions].astype(np.float32),
            NEXT_OBSERVATION: observation[rows_i],
            EXTRAS: tree.unflatten_as(self._extras_structure,
                                      [ring[where, positions] for ring in self._extras]),
        }
        for i in range(len(where)):
            self._write(tree.map_structure(lambda column, i=i: column[i], batch))
        self.transitions_written += len(where)
