"""A Faust table seen through the runner's :class:`~services.worker.runner.Table` port:
changelog first, acknowledged, then the local store, then the persisted changelog offset."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import rocksdict
from aiokafka.structs import RecordMetadata
from faust.types import TP

from sagas.machinery.history import is_chunk_key
from services.worker.deadlines import indexed_key
from services.worker.faust_seam import (
    PERSISTED_OFFSET_KEY,
    active_partitions,
    in_partition,
    is_memory_store,
    is_rocksdict_store,
    open_partition_dbs,
    partition_db,
)
from services.worker.positions import position_key
from services.worker.runner import Positions, StateWrite

SendTo = Callable[[str, bytes, bytes | None, int], Awaitable[Awaitable[RecordMetadata]]]
"""Queue a record (None: a tombstone) for one partition of a topic; the awaited result is
its delivery future."""

TABLE_OWN = "\x00"
"""The first character of every key the worker keeps beside the records (input positions,
deadline index entries and flags): no envelope key starts with it."""


class FaustTable:
    """A Faust table seen through the runner's :class:`~services.worker.runner.Table` port.

    Writes do not go through Faust's ``table[key] = value``: that applies the value to the
    local RocksDB at once and sends the changelog record later, so a SIGKILL in between
    leaves a local store AHEAD of its changelog. Faust then recovers by re-applying the
    changelog records after the offset it has persisted locally, which puts the keys those
    records touch back to older values while other keys keep newer ones: a saga found at an
    older state than the position stored for its partition (RELIABILITY.md, run
    021116af19). Here the changelog comes first: a batch's records are sent and
    acknowledged, then applied locally, then the changelog offset they reached is persisted
    (the local store is never ahead of the changelog, and re-applying any suffix of the
    changelog over it gives the changelog's own state).
    """

    def __init__(
        self, table: Any, send_to: SendTo, still_member: Callable[[], None] = lambda: None
    ) -> None:
        self.table = table
        self._send_to = send_to
        self._still_member = still_member
        """Called once a write's changelog records are acknowledged, before they are
        stored: it ends the process when it may have lost its partitions while they were in
        flight (services/worker/membership.py), so a restart recovers them from the
        changelog."""

    def load(self, key: str, partition: int) -> bytes | None:
        with in_partition(partition):
            value: bytes | None = self.table.data.get(key.encode())
            return value

    def load_position(self, topic: str, partition: int) -> int | None:
        raw = self.load(position_key(topic, partition), partition)
        return None if raw is None else int(raw)

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        writes = [(s.key.encode(), s.value, s.partition) for s in states]
        writes += [
            (position_key(topic, partition).encode(), str(offset).encode(), partition)
            for (topic, partition), offset in positions.items()
        ]
        if not writes:
            return
        changelog = self.table.changelog_topic.get_topic_name()
        futures = [await self._send_to(changelog, k, v, p) for k, v, p in writes]
        acked = await asyncio.gather(*futures)
        self._still_member()
        store = self.table.data
        _store_locally(store, writes)
        reached: dict[int, int] = {}
        for meta in acked:
            reached[meta.partition] = max(meta.offset, reached.get(meta.partition, -1))
        for partition, offset in reached.items():
            store.set_persisted_offset(TP(changelog, partition), offset)

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every key's state (positions, deadline index entries and history chunks left
        out). Batches may write while the caller iterates (the deadline rebuild yields to
        them): RocksDB iterators read a snapshot, but a dict refuses to change size under an
        iterator, so the memory store's items are copied first."""
        store = self.table.data
        everything = list(store.items()) if is_memory_store(store) else store.items()
        for key, value in everything:
            text = key.decode()
            if not text.startswith(TABLE_OWN) and not is_chunk_key(text):
                yield text, value

    # --- what the deadline index reads (services/worker/deadlines.py) ----------------------
    # Faust's RocksDB store keeps one database per partition (those of the partitions this
    # worker holds); rocksdict's ``keys(from_key=...)`` reads a key range in order. The
    # memory store (tests only) is one dict for every partition: it reads as partition 0 and
    # its entries are never missing.

    def held_partitions(self) -> Sequence[int]:
        """The partitions this process is the active writer of, by its assignment: not its
        standbys, whose stores Faust writes from the changelog alone, nor a partition taken
        away whose database is still (or again) open. An index entry written for either (the
        deadline rebuild repairs a partition's index) went to the changelog of a partition
        another worker owns, and for a standby set its persisted offset past the records
        still in Faust's standby buffer: the store skipped them for good (RELIABILITY.md,
        "Three workers")."""
        store = self.table.data
        if is_rocksdict_store(store):
            actives = active_partitions(self.table)
            return sorted(p for p in open_partition_dbs(store) if p in actives)
        return [0]

    def index_keys(self, partition: int, start: str, stop: str) -> Iterator[str]:
        store = self.table.data
        if not is_rocksdict_store(store):
            yield from sorted(k.decode() for k in list(store) if start <= k.decode() < stop)
            return
        db = open_partition_dbs(store).get(partition)
        if db is None:
            return
        end = stop.encode()
        for key in db.keys(from_key=start.encode()):
            if key >= end:
                return
            yield key.decode()

    def needs_index(self, partition: int) -> bool:
        if not is_rocksdict_store(self.table.data):
            return False
        return self.load(indexed_key(partition), partition) is None

    def records(self, partition: int) -> Iterator[tuple[str, bytes]]:
        store = self.table.data
        db = open_partition_dbs(store).get(partition) if is_rocksdict_store(store) else None
        if db is None:
            return
        for key, value in db.items():
            text = key.decode(errors="replace")
            own = key == PERSISTED_OFFSET_KEY or text.startswith(TABLE_OWN)
            if not own and not is_chunk_key(text):
                yield text, value


def _store_locally(store: Any, writes: Sequence[tuple[bytes, bytes | None, int]]) -> None:
    """Apply acknowledged writes to the local store, in order. RocksDB takes them as one
    write batch per partition, as Faust applies its changelog in recovery: a batch's states
    and positions land together, and each entry costs ~2 us instead of ~14 through Faust's
    per-key path (its event lookup and key index are for reads outside a partition, which
    the worker never does: :meth:`FaustTable.load` names the partition)."""
    if is_rocksdict_store(store):
        batches: dict[int, Any] = {}
        for key, value, partition in writes:
            if (batch := batches.get(partition)) is None:
                batch = batches[partition] = rocksdict.WriteBatch(raw_mode=True)
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        for partition, batch in batches.items():
            partition_db(store, partition).write(batch)
        return
    for key, value, partition in writes:
        with in_partition(partition):
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value
