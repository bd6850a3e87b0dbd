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
its changelog, as a new worker would. Run at the worker's start; a partition given back to
a worker that kept running is not covered (README, "What Sagaline guarantees").
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from rocksdict import AccessType, Options, Rdict

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import CHANGELOG_CONFIG
from services.worker.faust_seam import PERSISTED_OFFSET_KEY, partition_stores, table_dirs

log = logging.getLogger(__name__)

MAX_AGE = timedelta(milliseconds=int(CHANGELOG_CONFIG["delete.retention.ms"])) - timedelta(hours=1)
"""How old a store's last applied record may be: the changelogs' tombstone retention, less an
hour for the clocks of the worker that wrote it and of this one."""


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
) -> list[str]:
    """Delete the local stores under ``settings.data_dir`` whose last applied changelog
    record is older than ``max_age`` or gone; returns a line for each."""
    tables = table_dirs(settings.data_dir)
    stores = [s for d in tables for s in local_stores(d, settings.app_id)]
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
