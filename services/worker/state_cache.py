"""Decoded states kept between batches, so a key's record is not parsed from JSON on every
message (a product's ledger record is tens of KB: its decode dominated a reserve).

The cache only ever holds what the table holds: an entry is put either right after it was
decoded from the table, or after :meth:`Table.write` returned with it stored. A batch whose
write fails drops its keys (the table may hold the old or the new state of each). A
rebalance changes which states this worker may trust (another worker may have written a
partition while this one did not own it), so entries of revoked partitions are dropped,
and every assignment clears the rest and starts a new generation: a batch that was in
flight across it stores nothing in the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from sagas.machinery.record import Record


class StateCache:
    """At most ``capacity`` decoded records, least recently used evicted first; 0 disables."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.generation = 0
        self._entries: OrderedDict[str, tuple[int, Record[Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, partition: int) -> Record[Any] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != partition:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: str, partition: int, record: Record[Any], generation: int) -> None:
        """Keep ``record`` as the table's state of ``key``, unless a rebalance came since
        ``generation`` was read."""
        if self.capacity <= 0 or generation != self.generation:
            return
        self._entries[key] = (partition, record)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def discard(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._entries.pop(key, None)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget the keys of partitions this worker no longer owns."""
        gone = set(partitions)
        self.generation += 1
        for key in [k for k, (p, _) in self._entries.items() if p in gone]:
            del self._entries[key]

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()
