"""A dataset becomes replay: its episodes go through the same adders the inference
server uses, into tables that sample uniformly and never remove.

An existing learner then trains from it unchanged: the tables keep the names and
signatures of the agent's own (`UnrollAdder` unrolls for V-trace and R2D2,
`NStepTransitionAdder` transitions for SAC, D4PG and the offline agents); only how they
sample differs. Offline data is sampled many times, so a table is uniform, removes
nothing (its `max_size` must hold the whole dataset) and lets the learner sample as soon
as it holds an item, with no rate limiter between loading and learning.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import reverb
import tree

from seed_agents.datasets.format import (
    ACTION,
    DISCOUNT,
    EXTRAS_PREFIX,
    FILLED_EXTRAS,
    OBSERVATION,
    REWARD,
    STEP_TYPE,
    DatasetError,
    check_matches,
    extras_fields,
)
from seed_agents.datasets.reader import Dataset, iterate_episodes, open_dataset
from seed_agents.datasets.rlds import (
    RLDSDataset,
    check_rlds_matches,
    iterate_rlds_episodes,
    open_rlds,
    rlds_path,
)
from seed_agents.replay import offline_table, unrolls

DEFAULT_MAX_ITEMS = 10_000_000


def as_offline_table(table: reverb.Table, max_size: int = DEFAULT_MAX_ITEMS) -> reverb.Table:
    """An `offline_table` with `table`'s name and signature."""
    return offline_table(table.name, max_size, table.info.signature)


def _column(group: list[Mapping[str, np.ndarray]], active: np.ndarray, name: str, t: int,
            extras_spec: Mapping[str, Any]) -> np.ndarray:
    """Field `name` at step `t` of the `active` episodes of `group`; an extra the
    dataset lacks but the agent can do without gets its `FILLED_EXTRAS` value."""
    if name in group[0]:
        return np.stack([group[k][name][t] for k in active])
    extra = name[len(EXTRAS_PREFIX):]
    spec = extras_spec[extra]
    return np.full((len(active), *spec.shape), FILLED_EXTRAS[extra], spec.dtype)


def feed_episodes(episodes: Iterable[Mapping[str, np.ndarray]], adder: Any,
                  extras_spec: Mapping[str, Any], num_slots: int,
                  initial_state: Any = ()) -> tuple[int, int]:
    """Feeds the episodes to `adder` as the inference server would have: `num_slots`
    episodes side by side, one per environment slot, a row of every running one per
    `add` (`prev_action` rebuilt from the actions; `initial_state`, the policy's state
    of one environment, as every row's recurrent state). Side by side, the adder's
    writer keeps `num_slots` items in flight instead of waiting for each. Extras the
    adder does not take are left out. Returns (episodes, steps)."""
    names = list(extras_fields(extras_spec))
    structure = dict(extras_spec)
    fields = [OBSERVATION, ACTION, REWARD, DISCOUNT, STEP_TYPE,
              *(EXTRAS_PREFIX + name for name in names)]
    states = tree.map_structure(lambda s: np.repeat(s, num_slots, axis=0), initial_state)
    count = steps = 0
    iterator = iter(episodes)
    while group := list(itertools.islice(iterator, num_slots)):
        lengths = np.array([len(episode[STEP_TYPE]) for episode in group])
        previous = [np.zeros_like(episode[ACTION][0]) for episode in group]
        for t in range(int(lengths.max())):
            active = np.flatnonzero(lengths > t)
            columns = [_column(group, active, name, t, extras_spec) for name in fields]
            actions = columns[1]
            rows = {
                unrolls.OBSERVATION: columns[0],
                unrolls.PREV_ACTION: np.stack([previous[k] for k in active]),
                unrolls.REWARD: columns[2],
                unrolls.DISCOUNT: columns[3],
                unrolls.STEP_TYPE: columns[4],
                unrolls.ACTION: actions,
                unrolls.EXTRAS: tree.unflatten_as(structure, columns[5:]),
            }
            for i, k in enumerate(active):
                previous[k] = actions[i]
            state = tree.unflatten_as(states, [s[:len(active)] for s in tree.flatten(states)])
            adder.add(active, rows, state)
        count += len(group)
        steps += int(lengths.sum())
    return count, steps


@dataclasses.dataclass(frozen=True)
class LoadedReplay:
    """What `load_replay` put where: the server (the caller stops it) and the counts."""

    server: reverb.Server
    address: str
    table: str
    episodes: int
    steps: int
    items: int
    seconds: float
    dataset: Dataset | RLDSDataset

    def summary(self) -> str:
        return (f"replay: {self.episodes:,} episodes ({self.steps:,} steps) of "
                f"{self.dataset.path} loaded as {self.items:,} items of table "
                f"{self.table!r} in {self.seconds:.1f} s")


def load_replay(path: str, builder: Any, env_spec: Any, policy: Any,
                environment: str | None = None, max_items: int | None = None,
                port: int | None = None, num_slots: int = 32) -> LoadedReplay:
    """Starts a Reverb server with `builder`'s tables as offline tables
    (`as_offline_table`) and fills them with the episodes of the dataset at `path` (our
    format's directory, or `rlds:DIR`, an RLDS one: `seed_agents.datasets.rlds`) through
    `builder.make_adder` (the inference server's adder).

    `num_slots` episodes are fed side by side (see `feed_episodes`). `max_items`
    bounds each table (default: the builder config's `replay_size`, else
    10 million). The dataset is checked against the environment and the agent first.

    Raises:
      DatasetError: for a dataset that does not match, is empty, truncated or corrupted
        (the message names the file), or holds more items than `max_items`.
    """
    agent = type(builder).__name__.removesuffix("Builder")
    rlds_directory = rlds_path(path)
    if rlds_directory is not None:  # `rlds:PATH`: a TFDS directory (a recording, D4RL, ...)
        dataset = open_rlds(rlds_directory)
        check_rlds_matches(dataset, env_spec, policy.extras_spec, environment, agent)
        episodes = iterate_rlds_episodes(dataset)
    else:
        dataset = open_dataset(path)
        check_matches(dataset.spec, dataset.path, env_spec, policy.extras_spec, environment,
                      agent)
        episodes = iterate_episodes(path, dataset)
    if max_items is None:
        max_items = int(getattr(getattr(builder, "config", None), "replay_size",
                                DEFAULT_MAX_ITEMS))
    tables = [as_offline_table(t, max_items)
              for t in builder.make_replay_tables(env_spec, policy)]
    server = reverb.Server(tables, port=port)
    try:
        start = time.monotonic()
        client = reverb.Client(f"localhost:{server.port}")
        adder = builder.make_adder(client, num_slots, env_spec, policy)
        episodes, steps = feed_episodes(episodes, adder, policy.extras_spec, num_slots,
                                        policy.initial_state(1))
        adder.flush()
        items = int(client.server_info()[builder.table].current_size)
        written = getattr(adder, "unrolls_written", getattr(adder, "transitions_written", items))
        if written > items:
            raise DatasetError(f"{dataset.path} makes {written:,} items for table "
                               f"{builder.table!r}, which holds {max_items:,}: raise the "
                               "agent's replay_size (--set replay_size=...).")
        if items == 0:
            raise DatasetError(f"{dataset.path}: its {episodes} episodes ({steps} steps) make "
                               f"no item of table {builder.table!r} (episodes shorter than "
                               "an unroll?).")
        return LoadedReplay(server, f"localhost:{server.port}", builder.table, episodes,
                            steps, items, time.monotonic() - start, dataset)
    except BaseException:
        server.stop()
        raise
