"""Durable deadlines: the truth is in table state, this is only an index to find them fast.

Deadlines (a reservation's expiry, a saga step's timeout) are stored in each key's record.
A worker keeps a heap of (due time, key) for the partitions it owns: fed by every record it
stores, and rebuilt from its table after each rebalance or restart. A timer pops due keys
and sends a Tick to that key's own topic, so the deadline fires inside the key's stream,
serialized with every other message for it. A stale heap entry costs one no-op tick.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime


class DeadlineIndex:
    def __init__(self, rescan_every_s: float = 60.0) -> None:
        self._heap: list[tuple[datetime, str]] = []
        self._scheduled: dict[str, datetime] = {}
        self.stale = True
        """True until rebuilt from the table (at start, and after every rebalance)."""
        self.rescan_every_s = rescan_every_s
        """A periodic full rebuild as well: a safety net should a tick ever go astray."""
        self._rebuilt_at = float("-inf")

    def needs_rebuild(self, monotonic_now: float) -> bool:
        return self.stale or monotonic_now - self._rebuilt_at > self.rescan_every_s

    def schedule(self, key: str, due: datetime | None) -> None:
        if due is None:
            self._scheduled.pop(key, None)
            return
        if self._scheduled.get(key) == due:
            return
        self._scheduled[key] = due
        heapq.heappush(self._heap, (due, key))

    def rebuild(self, entries: Iterable[tuple[str, datetime | None]], monotonic_now: float) -> None:
        self._heap.clear()
        self._scheduled.clear()
        for key, due in entries:
            self.schedule(key, due)
        self.stale = False
        self._rebuilt_at = monotonic_now

    def pop_due(self, now: datetime, limit: int = 10_000) -> list[str]:
        """Keys whose earliest deadline is due; each key once."""
        keys: list[str] = []
        while self._heap and self._heap[0][0] <= now and len(keys) < limit:
            due, key = heapq.heappop(self._heap)
            if self._scheduled.get(key) == due:
                del self._scheduled[key]
                keys.append(key)
        return keys

    def __len__(self) -> int:
        return len(self._scheduled)
