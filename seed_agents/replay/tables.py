"""Reverb table factories: a FIFO queue for on-policy learners, a prioritized table for
off-policy sequences, a uniform rate-limited table for off-policy transitions, and a
uniform table that never removes for a fixed (offline) dataset.

Reverb has no authentication and its server listens on every interface of the host
(dm-reverb 0.14 takes a port, not a bind address): keep replay on a private network.
"""

from __future__ import annotations

from typing import Any

import reverb


def queue_table(name: str, max_size: int, signature: Any = None) -> reverb.Table:
    """A FIFO table whose items are sampled exactly once.

    `max_size` bounds how much experience waits for the learner. When the queue is full,
    inserts block (writers feel it in `flush`), which is the back-pressure that keeps an
    on-policy learner's data fresh: the policy lag is at most `max_size` items.
    """
    if max_size < 1:
        raise ValueError(f"queue max_size must be >= 1, got {max_size}.")
    return reverb.Table.queue(name=name, max_size=max_size, signature=signature)


def prioritized_table(
    name: str,
    max_size: int,
    priority_exponent: float = 0.9,
    samples_per_insert: float = 1.0,
    min_size_to_sample: int = 1,
    error_buffer: float | None = None,
    signature: Any = None,
) -> reverb.Table:
    """A prioritized table with FIFO removal and a samples-per-insert rate limiter.

    The rate limiter holds the ratio of samples to inserts near `samples_per_insert`;
    `error_buffer` (default: a generous 100 batches' worth) is how far the ratio may drift
    before the faster side blocks, so short hiccups on either side stall nobody.
    """
    _check_limits(max_size, samples_per_insert, min_size_to_sample)
    if not 0.0 <= priority_exponent:
        raise ValueError(f"priority_exponent must be >= 0, got {priority_exponent}.")
    if error_buffer is None:
        error_buffer = max(100.0 * samples_per_insert, 2.0 * samples_per_insert)
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Prioritized(priority_exponent),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=samples_per_insert,
            min_size_to_sample=min_size_to_sample,
            error_buffer=error_buffer,
        ),
        signature=signature,
    )


def rate_limited_table(
    name: str,
    max_size: int,
    samples_per_insert: float,
    min_size_to_sample: int,
    error_buffer: float,
    signature: Any = None,
) -> reverb.Table:
    """A uniform table with FIFO removal whose rate limiter paces learning against acting.

    Acme's arrangement for off-policy continuous control: every item is a transition; the
    learner samples them uniformly, the oldest leave first once `max_size` is reached, and
    Reverb's `SampleToInsertRatio` holds the ratio of sampled items to inserted ones near
    `samples_per_insert` (a learner step of batch B samples B items: `samples_per_insert /
    B` learner steps per env step). Nothing is sampled until `min_size_to_sample` items
    are in; after that `error_buffer` (in sampled items) is how far either side may run
    ahead before it blocks: the learner waits for data, or the writers (and with them the
    inference server's batches) wait for the learner.
    """
    _check_limits(max_size, samples_per_insert, min_size_to_sample)
    # Reverb refuses a buffer that cannot hold one insert's worth of samples.
    if error_buffer < max(1.0, samples_per_insert):
        raise ValueError(f"error_buffer must be >= max(1, samples_per_insert="
                         f"{samples_per_insert}), got {error_buffer}.")
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=samples_per_insert,
            min_size_to_sample=min_size_to_sample,
            error_buffer=error_buffer,
        ),
        signature=signature,
    )


def offline_table(name: str, max_size: int, signature: Any = None) -> reverb.Table:
    """A uniform table for a fixed dataset: sampled many times, never removing while it
    holds fewer than `max_size` items, inserts never blocked, samples as soon as it
    holds one item (no rate limiter between loading the data and learning from it)."""
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}.")
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def _check_limits(max_size: int, samples_per_insert: float, min_size_to_sample: int) -> None:
    if max_size < 1:
        raise ValueError(f"max_size must be >= 1, got {max_size}.")
    if samples_per_insert <= 0:
        raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}.")
    if not 1 <= min_size_to_sample <= max_size:
        raise ValueError(
            f"min_size_to_sample must be in [1, max_size={max_size}], got {min_size_to_sample}."
        )
