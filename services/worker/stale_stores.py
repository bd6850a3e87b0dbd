"""Local table stores too old to trust are discarded before the worker opens them.

Faust recovers a table partition by re-applying its changelog from the offset persisted in
the local RocksDB. A compacted changelog keeps a tombstone only ``delete.retention.ms``
after the cleaner pass that compacted what it deletes (runtime/topics.py,
``CHANGELOG_CONFIG``). A local store that last applied its changelog before that may never
see the tombstone of a key deleted since (a retired key: sagas/machinery/retirement.py)
and would keep the key as it last knew it.

The record at the store's persisted offset (the last it applied) carries the time it was
written. A tombstone written after it was written later still, and is removed no earlier
than the retention after that: so a store whose last record is younger than the retention
has missed no tombstone. A store whose last record is older, or gone (compacted away, so
its time is unknown), is deleted here, and Faust recovers that partition from the start of
its changelog, as a new worker would.

A store is judged each time it is opened again, not only at the worker's start: a worker
that runs for weeks closes a partition's store when a rebalance takes the partition away
and keeps it on disk, and the partition may come back days later (soak soaka21559: a store
closed for nine minutes under a 60 s tombstone retention brought retired sagas back to an
older step, and they decided that step again). :func:`judge_stores_on_assignment` runs
before Faust opens the stores of an assignment: every assigned partition whose store is on
disk but not open here is judged, at the first assignment after a start as at any later
one. The age allowed follows the retention the broker holds for the changelogs
(:func:`runtime.topics.tombstone_retention`), not the one Sagaline declares.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from rocksdict import AccessType, Options, Rdict

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import CHANGELOG_CONFIG, tombstone_retention
from services.worker.faust_seam import (
    PERSISTED_OFFSET_KEY,
    is_rocksdict_store,
    open_partition_dbs,
    partition_stores,
    table_dirs,
)

log = logging.getLogger(__name__)


def max_age(retention: timedelta) -> timedelta:
    """How old a store's last applied record may be under a tombstone ``retention``: the
    retention less a twenty-fourth of it (an hour of the default day) for the clocks of the
    worker that wrote the record and of this one."""
    return retention - retention / 24


MAX_AGE = max_age(timedelta(milliseconds=int(CHANGELOG_CONFIG["delete.retention.ms"])))
"""The age allowed under the retention Sagaline declares for its changelogs."""


@dataclass(frozen=True)
class LocalStore:
    path: Path
    changelog: str
    partition: int
    persisted: int


WrittenAt = Callable[[Mapping[TopicPartition, int]], Awaitable[dict[TopicPartition, datetime]]]
"""When the record at each (changelog partition, offset) was written; a record that is not
there (compacted away) is left out."""


def stale(
    stores: list[LocalStore],
    written_at: Mapping[TopicPartition, datetime],
    now: datetime,
    max_age: timedelta,
) -> list[tuple[LocalStore, str]]:
    """The stores to discard, each with the reason."""
    found = []
    for store in stores:
        when = written_at.get(TopicPartition(store.changelog, store.partition))
        if when is None:
            found.append((store, f"its last record (offset {store.persisted}) is gone"))
        elif now - when > max_age:
            found.append((store, f"its last record was written {now - when} ago"))
    return found


def local_stores(tables_dir: Path, app_id: str) -> list[LocalStore]:
    """Every table partition's RocksDB under ``tables_dir`` that holds a persisted offset."""
    stores = []
    for table, partition, path in partition_stores(tables_dir):
        persisted = _persisted_offset(path)
        if persisted is not None:
            changelog = f"{app_id}-{table}-changelog"
            stores.append(LocalStore(path, changelog, partition, persisted))
    return stores


def _persisted_offset(path: Path) -> int | None:
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        raw = db.get(PERSISTED_OFFSET_KEY)
    finally:
        db.close()
    return None if raw is None else int(raw)


async def discard_stale_stores(
    settings: Settings,
    max_age: timedelta,
    now: datetime,
    written_at: WrittenAt | None = None,
    stores: list[LocalStore] | None = None,
) -> list[str]:
    """Delete the local stores (``stores``, or every one under ``settings.data_dir``) whose
    last applied changelog record is older than ``max_age`` or gone; returns a line for each."""
    if stores is None:
        stores = [
            s for d in table_dirs(settings.data_dir) for s in local_stores(d, settings.app_id)
        ]
    if not stores:
        return []
    read = written_at or (lambda offsets: _written_at(settings, offsets))
    times = await read({TopicPartition(s.changelog, s.partition): s.persisted for s in stores})
    lines = []
    for store, reason in stale(stores, times, now, max_age):
        shutil.rmtree(store.path)
        line = (
            f"discarded the local store {store.path.name}: {reason}; Faust recovers it "
            "from its changelog"
        )
        log.warning(line)
        lines.append(line)
    return lines


def closed_stores(assigned: Iterable[TopicPartition], tables: Iterable[Any]) -> list[LocalStore]:
    """The stores an assignment is about to open again: each assigned changelog partition
    of ``tables`` (Faust tables) whose RocksDB is on disk but not open in this process, and
    holds a persisted offset (an empty one has nothing to be stale with)."""
    found = []
    for table in tables:
        store = table.data
        if not is_rocksdict_store(store):
            continue
        changelog = table.changelog_topic.get_topic_name()
        opened = open_partition_dbs(store)
        for tp in assigned:
            if tp.topic != changelog or tp.partition in opened:
                continue
            path = Path(store.partition_path(tp.partition))
            persisted = _persisted_offset(path) if path.exists() else None
            if persisted is not None:
                found.append(LocalStore(path, changelog, tp.partition, persisted))
    return found


JUDGE_TIMEOUT_S = 15.0
"""How long an assignment waits for the broker's answers (a describe and one record per store,
well under a second when it is up) before it discards the stores unjudged: the group waits
for this member meanwhile."""


def judge_stores_on_assignment(app: faust.App, settings: Settings) -> None:
    """Judge the stores of each assignment before Faust opens them (the module's docstring):
    Faust's table manager hands an assignment to each table's store, which opens the active
    partitions' databases, and then to its recovery, which reads every assigned partition's
    persisted offset. The judgement runs first. When the broker cannot be asked, every store
    judged is discarded: recovering a partition from its changelog is always right."""
    tables: Any = app.tables
    on_rebalance = tables.on_rebalance
    retention: list[timedelta] = []  # asked of the broker once, at the first judgement

    async def judged(
        assigned: set[Any], revoked: set[Any], newly_assigned: set[Any], generation_id: int = 0
    ) -> None:
        held = app.assignor.assigned_actives() | app.assignor.assigned_standbys()
        stores = closed_stores(held, tables.values())
        if stores:
            try:
                async with asyncio.timeout(JUDGE_TIMEOUT_S):
                    if not retention:
                        retention.append(await tombstone_retention(settings))
                    await discard_stale_stores(
                        settings, max_age(retention[0]), datetime.now(UTC), stores=stores
                    )
            except Exception as exc:
                for store in stores:
                    shutil.rmtree(store.path, ignore_errors=True)
                log.warning(
                    "discarded %d local stores without judging them (%s): Faust recovers "
                    "them from their changelogs",
                    len(stores),
                    exc,
                )
        await on_rebalance(assigned, revoked, newly_assigned, generation_id)

    tables.on_rebalance = judged


async def _written_at(
    settings: Settings, offsets: Mapping[TopicPartition, int], timeout_s: float = 10.0
) -> dict[TopicPartition, datetime]:
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    await consumer.start()
    found: dict[TopicPartition, datetime] = {}
    try:
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        waiting = set(offsets)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while waiting and asyncio.get_running_loop().time() < deadline:
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                if tp in waiting and records:
                    waiting.discard(tp)
                    first = records[0]
                    if first.offset == offsets[tp]:
                        found[tp] = datetime.fromtimestamp(first.timestamp / 1000, tz=UTC)
                    consumer.pause(tp)
    finally:
        await consumer.stop()
    return found
