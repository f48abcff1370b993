"""A log of rejected streams that stays readable under bad traffic.

A misconfigured runner fleet (a wrong token, a stale protocol version) or a hostile peer
can open streams faster than anyone reads warnings: one line per rejection made
thousands of lines in minutes. `RejectionLog` writes the first rejection from a peer (a
host, its ports folded together) as it happens, counts the next ones, and writes one
summary line per peer and interval: how many, by status, and the last reason. Memory is
bounded: it tracks at most `max_peers` peers, summarising the oldest when a new one
comes.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import time

_PORT = re.compile(r"^((?:ipv4|ipv6):.*):\d+$")


def peer_host(peer: str) -> str:
    """`context.peer()` without the port: "ipv4:127.0.0.1:5432" -> "ipv4:127.0.0.1"."""
    match = _PORT.match(peer)
    return match.group(1) if match else peer


@dataclasses.dataclass
class _Peer:
    since: float
    count: int = 0  # Rejections since `since` that were not logged one by one.
    codes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    last: str = ""


class RejectionLog:
    """Logs rejected streams per peer: the first at once, the rest as summaries.

    Not thread-safe: the inference service calls it from its event loop only.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 max_peers: int = 1024, clock=time.monotonic):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}.")
        if max_peers < 1:
            raise ValueError(f"max_peers must be >= 1, got {max_peers}.")
        self._logger = logger
        self._interval_s = interval_s
        self._max_peers = max_peers
        self._clock = clock
        self._peers: collections.OrderedDict[str, _Peer] = collections.OrderedDict()
        self.rejected: collections.Counter = collections.Counter()  # By status, ever.

    def reject(self, peer: str, code: str, details: str) -> None:
        """Records one rejected stream from `peer` with status `code` and `details`."""
        self.rejected[code] += 1
        host = peer_host(peer)
        now = self._clock()
        entry = self._peers.get(host)
        if entry is not None and now - entry.since < self._interval_s:
            entry.count += 1
            entry.codes[code] += 1
            entry.last = f"{code}: {details}"
            return
        if entry is not None:
            self._summarise(host, entry, now)
            del self._peers[host]
        elif len(self._peers) >= self._max_peers:
            oldest, old = self._peers.popitem(last=False)
            self._summarise(oldest, old, now)
        self._peers[host] = _Peer(since=now)
        self._logger.warning("Rejected a stream from %s: %s: %s", peer, code, details)

    def flush(self, force: bool = False) -> None:
        """Writes the summaries of intervals that ended (all of them with `force`)."""
        now = self._clock()
        for host in list(self._peers):
            entry = self._peers[host]
            if force or now - entry.since >= self._interval_s:
                self._summarise(host, entry, now)
                del self._peers[host]

    def _summarise(self, host: str, entry: _Peer, now: float) -> None:
        if not entry.count:
            return
        codes = ", ".join(f"{code} {n}" for code, n in entry.codes.most_common())
        self._logger.warning(
            "Rejected %d more streams from %s in the last %.0f s (%s); the last: %s",
            entry.count, host, now - entry.since, codes, entry.last,
        )
