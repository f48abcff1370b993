"""N-step transitions against a brute-force reference, and their round trip through Reverb."""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tree
from dm_env import specs

from seed_agents.replay import (
    NStepTransitionAdder,
    UnrollWriter,
    make_dataset,
    rate_limited_table,
    row_spec,
    transition_signature,
)
from seed_agents.replay import transitions as tr
from seed_agents.replay import unrolls as u
from seed_agents.specs import EnvironmentSpec

OBS, ACT = 3, 2
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.BoundedArray((ACT,), np.float32, -1.0, 1.0),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
EXTRAS = {"log_prob": specs.Array((), np.float32)}
FIRST, MID, LAST = 0, 1, 2


def _episode(rng: np.random.Generator, slot: int, number: int) -> list[dict]:
    """Rows of one episode: FIRST, MIDs, then LAST by termination or truncation."""
    length = int(rng.integers(1, 12))  # steps taken; rows = length + 1
    terminated = bool(rng.integers(2))
    rows = []
    for t in range(length + 1):
        step_type = FIRST if t == 0 else LAST if t == length else MID
        discount = 0.0 if (step_type == LAST and terminated) else 1.0
        rows.append({
            # The observation names its slot, episode and step: a transition says where
            # it came from.
            "observation": np.array([slot, number, t], np.float32),
            "reward": np.float32(0.0 if t == 0 else rng.normal()),
            "discount": np.float32(discount),
            "step_type": np.uint8(step_type),
            "action": rng.uniform(-1, 1, ACT).astype(np.float32),
            "log_prob": np.float32(rng.normal()),
        })
    return rows


def _reference(episode: list[dict], n: int, gamma: float) -> list[dict]:
    """The transitions of one episode, computed the slow, obvious way."""
    out = []
    length = len(episode) - 1
    for t in range(length):
        m = min(n, length - t)
        ret, disc = 0.0, 1.0
        for k in range(1, m + 1):
            ret += disc * float(episode[t + k]["reward"])
            disc *= gamma * float(episode[t + k]["discount"])
        out.append({"observation": episode[t]["observation"], "action": episode[t]["action"],
                    "reward": ret, "discount": disc,
                    "next_observation": episode[t + m]["observation"],
                    "log_prob": episode[t]["log_prob"]})
    return out


def _batch(rows: list[dict]) -> dict:
    stack = {key: np.stack([r[key] for r in rows]) for key in rows[0]}
    return {
        u.OBSERVATION: stack["observation"],
        u.PREV_ACTION: np.zeros((len(rows), ACT), np.float32),
        u.REWARD: stack["reward"].astype(np.float32),
        u.DISCOUNT: stack["discount"].astype(np.float32),
        u.STEP_TYPE: stack["step_type"].astype(np.uint8),
        u.ACTION: stack["action"],
        u.EXTRAS: {"log_prob": stack["log_prob"]},
    }


@pytest.mark.parametrize("n", [1, 3, 5])
def test_transitions_match_a_brute_force_reference_over_random_episodes(n):
    rng = np.random.default_rng(n)
    gamma = 0.97
    slots = 6
    written: list[dict] = []
    adder = NStepTransitionAdder(written.append, num_slots=slots, n_step=n, discount=gamma,
                                 row_spec=row_spec(SPEC, EXTRAS))
    # Each slot plays its own episodes; every call carries a random subset of slots, as
    # the server's batches do.
    timelines = {s: [r for e in range(8) for r in _episode(rng, s, e)] for s in range(slots)}
    cursor = dict.fromkeys(range(slots), 0)
    while any(cursor[s] < len(timelines[s]) for s in range(slots)):
        live = [s for s in range(slots) if cursor[s] < len(timelines[s])]
        chosen = sorted(rng.choice(live, size=int(rng.integers(1, len(live) + 1)),
                                   replace=False).tolist())
        adder.add(np.array(chosen), _batch([timelines[s][cursor[s]] for s in chosen]))
        for s in chosen:
            cursor[s] += 1

    for s in range(slots):
        episodes = [[r for r in timelines[s] if r["observation"][1] == e] for e in range(8)]
        expected = [t for e in episodes for t in _reference(e, n, gamma)]
        got = [t for t in written if t[tr.OBSERVATION][0] == s]
        assert len(got) == len(expected)
        for g, x in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g[tr.OBSERVATION], x["observation"])
            np.testing.assert_array_equal(g[tr.ACTION], x["action"])
            np.testing.assert_allclose(g[tr.REWARD], x["reward"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(g[tr.DISCOUNT], x["discount"], rtol=1e-6)
            np.testing.assert_array_equal(g[tr.NEXT_OBSERVATION], x["next_observation"])
            assert g[tr.EXTRAS]["log_prob"] == x["log_prob"]
            assert g[tr.REWARD].dtype == np.float32 and g[tr.DISCOUNT].dtype == np.float32
    assert adder.transitions_written == len(written)


def test_episode_ends_give_zero_or_bootstrapping_discounts():
    written: list[dict] = []
    adder = NStepTransitionAdder(written.append, num_slots=1, n_step=5, discount=0.5,
                                 row_spec=row_spec(SPEC, EXTRAS))
    slot = np.array([0])

    def play(discount_at_end: float) -> None:
        for t, step_type in enumerate([FIRST, MID, LAST]):
            adder.add(slot, _batch([{
                "observation": np.full(OBS, t, np.float32), "reward": np.float32(1.0),
                "discount": np.float32(discount_at_end if step_type == LAST else 1.0),
                "step_type": np.uint8(step_type), "action": np.zeros(ACT, np.float32),
                "log_prob": np.float32(0.0)}]))

    play(0.0)  # terminated after 2 steps: no future beyond the last reward
    assert [(t[tr.REWARD], t[tr.DISCOUNT]) for t in written] == [(1.5, 0.0), (1.0, 0.0)]
    written.clear()
    play(1.0)  # truncated: bootstrap from the final observation with gamma^m
    assert [(t[tr.REWARD], t[tr.DISCOUNT]) for t in written] == [(1.5, 0.25), (1.0, 0.5)]
    assert all(t[tr.NEXT_OBSERVATION][0] == 2 for t in written)  # the final observation


def test_reset_discards_pending_steps_and_a_first_row_starts_afresh():
    written: list[dict] = []
    adder = NStepTransitionAdder(written.append, num_slots=2, n_step=3, discount=0.9,
                                 row_spec=row_spec(SPEC, EXTRAS))
    rng = np.random.default_rng(0)
    episode = _episode(rng, 0, 0)
    while len(episode) < 6:
        episode = _episode(rng, 0, 0)
    for row in episode[:2]:  # two steps pending, no window closed yet
        adder.add(np.array([0]), _batch([row]))
    assert not written
    adder.reset(np.array([0]))  # e.g. its runner disconnected
    for row in episode:  # the same slot starts a new episode from its FIRST row
        adder.add(np.array([0]), _batch([row]))
    assert [t[tr.OBSERVATION][2] for t in written] == list(range(len(episode) - 1))


def test_bad_settings_are_refused():
    spec = row_spec(SPEC, EXTRAS)
    with pytest.raises(ValueError, match="n_step"):
        NStepTransitionAdder(list.append, 1, n_step=0, discount=0.9, row_spec=spec)
    with pytest.raises(ValueError, match="discount"):
        NStepTransitionAdder(list.append, 1, n_step=1, discount=1.5, row_spec=spec)
    with pytest.raises(ValueError, match="error_buffer"):
        rate_limited_table("t", 100, samples_per_insert=8.0, min_size_to_sample=10,
                           error_buffer=4.0)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        rate_limited_table("t", 100, samples_per_insert=1.0, min_size_to_sample=0,
                           error_buffer=10.0)


def test_transitions_round_trip_through_a_rate_limited_reverb_table():
    signature = transition_signature(SPEC, EXTRAS)
    table = rate_limited_table("transitions", 1000, samples_per_insert=1.0,
                               min_size_to_sample=4, error_buffer=100.0, signature=signature)
    server = reverb.Server([table], port=None)
    writer = UnrollWriter(server.localhost_client(), "transitions")
    try:
        written: list[dict] = []

        def sink(transition: dict) -> None:
            written.append(transition)
            writer.write(transition)

        adder = NStepTransitionAdder(sink, num_slots=1, n_step=2, discount=0.9,
                                     row_spec=row_spec(SPEC, EXTRAS))
        rng = np.random.default_rng(1)
        for e in range(3):
            for row in _episode(rng, 0, e):
                adder.add(np.array([0]), _batch([row]))
        writer.flush()
        assert len(written) >= 4
        dataset = make_dataset(f"localhost:{server.port}", "transitions", batch_size=4)
        sample = next(iter(dataset)).data
        assert sample[tr.OBSERVATION].shape == (4, OBS)
        assert sample[tr.ACTION].shape == (4, ACT) and sample[tr.REWARD].shape == (4,)
        originals = {tuple(t[tr.OBSERVATION]): t for t in written}
        for i in range(4):
            original = originals[tuple(sample[tr.OBSERVATION][i].numpy())]
            for key in (tr.ACTION, tr.REWARD, tr.DISCOUNT, tr.NEXT_OBSERVATION):
                np.testing.assert_array_equal(sample[key][i].numpy(), original[key])
            assert tree.flatten(sample[tr.EXTRAS])[0][i].numpy() == \
                original[tr.EXTRAS]["log_prob"]
    finally:
        writer.close()  # before its server stops
        server.stop()
