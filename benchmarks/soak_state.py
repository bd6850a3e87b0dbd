"""What the long run (bench_soak) counts besides memory, for issue 25: whether state, disk and
recovery stay bounded by live work.

- Records per table, counted from the workers' RocksDB files (read-only opens, beside the
  running workers), each table partition once: the copy with the highest persisted offset
  (a partition is held by its active worker and by its standby).
- Changelog records, read from offset 0 to the end: what a worker recovering from an empty
  data directory reads.
- SQL rows of the read side (timeline, positions, orders).
- The deadline index's keys at each rebuild and Faust's recoveries, parsed from the
  workers' logs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from rocksdict import AccessType, Options, Rdict
from sqlalchemy import Engine, func, select

from faults.stores import WORKER_OWN
from readside import schema
from runtime.kafka_security import aiokafka_options
from runtime.partitioner import partition_for
from runtime.settings import Settings
from runtime.topics import CHANGELOG_CONFIG, changelog_topic, table_name, topic_partitions
from sagas.machinery.history import is_chunk_key
from services.worker.faust_seam import PERSISTED_OFFSET_KEY, partition_stores, table_dirs


def _count_records(path: Path) -> tuple[int, int]:
    """(records, persisted offset) of one table partition's RocksDB: the keys that are
    records (not history chunks, not the worker's own entries)."""
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        offset = db.get(PERSISTED_OFFSET_KEY)
        records = 0
        for key in db.keys():  # noqa: SIM118 (an Rdict is not iterable)
            raw = bytes(key)  # type: ignore[arg-type]
            if raw == PERSISTED_OFFSET_KEY or raw.startswith(WORKER_OWN.encode()):
                continue
            if not is_chunk_key(raw.decode(errors="replace")):
                records += 1
    finally:
        db.close()
    return records, -1 if offset is None else int(offset)


def store_records(data_dirs: Iterable[Path], channels: Sequence[str]) -> dict[str, int]:
    """Records per channel's table, over every partition, counted from the stores."""
    best: dict[tuple[str, int], tuple[int, int]] = {}
    tables = {table_name(c): c for c in channels}
    for data_dir in data_dirs:
        for tables_dir in table_dirs(data_dir):
            for table, partition, path in partition_stores(tables_dir):
                if table not in tables:
                    continue
                try:
                    records, offset = _count_records(path)
                except Exception:  # a store being created or dropped right now
                    continue
                if offset >= best.get((table, partition), (-2, 0))[0]:
                    best[(table, partition)] = (offset, records)
    counts = dict.fromkeys(channels, 0)
    for (table, _), (_, records) in best.items():
        counts[tables[table]] += records
    return counts


async def changelog_records(settings: Settings, channels: Sequence[str]) -> dict[str, int]:
    """Records per channel's changelog, read from offset 0 to the end offsets (a consumer
    each: one reassigned to a second topic read none of it)."""
    counts: dict[str, int] = {}
    for channel in channels:
        consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
        await consumer.start()
        try:
            topic = changelog_topic(settings, channel)
            counts[channel] = await _read_count(consumer, await topic_partitions(consumer, topic))
        finally:
            await consumer.stop()
    return counts


async def _read_count(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> int:
    if not tps:
        return 0
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    ends = await consumer.end_offsets(tps)
    pending = {tp for tp in tps if ends[tp] > 0}
    seen = 0
    while pending:
        for tp, batch in (await consumer.getmany(*pending, timeout_ms=1000)).items():
            seen += sum(1 for r in batch if r.offset < ends[tp])
        pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
    return seen


def count_once(
    data_dirs: Sequence[Path], settings: Settings, channels: Sequence[str], database_url: str
) -> dict[str, int]:
    """The stores', changelogs' and SQL counts of one sample, for a process of its own: read
    in the soak's driver they held its event loop and its GIL for seconds a minute, and the
    driver stamps every order's latency."""
    row = {f"{c}_keys": n for c, n in store_records(data_dirs, channels).items()}
    changelogs = asyncio.run(changelog_records(settings, channels))
    row |= {f"{c}_changelog": n for c, n in changelogs.items()}
    if database_url:
        from tests.integration.readside import read_engine  # the child's own engine

        with read_engine(database_url) as engine:
            row |= {f"sql_{name}": n for name, n in sql_rows(engine).items()}
    return row


def sql_rows(engine: Engine) -> dict[str, int]:
    tables = {
        "timeline": schema.saga_timeline,
        "positions": schema.entity_positions,
        "orders": schema.MODEL_TABLES["orders"],
    }
    with engine.connect() as conn:
        return {
            name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
            for name, t in tables.items()
        }


REBUILT = re.compile(r"\[([\d-]+ [\d:,]+)\].*?(\S+): deadline index rebuilt: (\d+) keys")


@dataclass(frozen=True)
class Rebuild:
    at: datetime
    channel: str
    keys: int


def deadline_rebuilds(logs: Iterable[Path]) -> list[Rebuild]:
    """Every deadline index rebuild the workers logged, with its keys."""
    found = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if (m := REBUILT.search(line)) is not None:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
                found.append(Rebuild(at, m.group(2), int(m.group(3))))
    return sorted(found, key=lambda r: r.at)


STAMP = re.compile(r"^\[([\d-]+ [\d:,]+)\]")


def recoveries(log: Path) -> list[float]:
    """Seconds of each active recovery the log shows (from "Restoring state from changelog
    topics" to "Done reading from changelog topics")."""
    started: datetime | None = None
    took = []
    for line in log.read_text(errors="replace").splitlines():
        m = STAMP.match(line)
        if m is None:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if "Restoring state from changelog topics" in line:
            started = at
        elif "Done reading from changelog topics" in line and started is not None:
            took.append((at - started).total_seconds())
            started = None
    return took


def all_ready_after(logs: Sequence[Path], after: datetime) -> datetime | None:
    """When every one of ``logs`` had shown a "Worker ready" after ``after`` (local time,
    as the workers stamp their lines): the group's handover had placed and recovered every
    partition. None if one of them shows none."""
    found: list[datetime] = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            m = STAMP.match(line)
            if m is None or "Worker ready" not in line:
                continue
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            if at > after:
                found.append(at)
                break
    return max(found) if len(found) == len(logs) else None


def partition_of(order_id: str, partitions: int) -> int:
    every = list(range(partitions))
    return partition_for(order_id.encode(), every, every)


def back_after(done: Iterable[tuple[float, float, str, int]], at: float) -> dict[int, float]:
    """Per partition, seconds from ``at`` to the first outcome of an order sent after it
    there: ``done`` holds (sent, ended, status, partition) of every ended order."""
    back: dict[int, float] = {}
    for sent, ended, _, partition in done:
        if sent >= at:
            back[partition] = min(back.get(partition, float("inf")), ended - at)
    return back


def resumed_after(written: Iterable[tuple[float, int]], at_wall: float) -> dict[int, float]:
    """Per partition, seconds from ``at_wall`` to the first outcome a worker wrote there
    after it, of any order (sent before it too): when the partition was processed again,
    without the queue that built up meanwhile. ``written`` holds (written at, partition) of
    every ended order, wall clock as the records' timestamps (one box, one clock). Only a
    partition's owner writes its outcomes, so none of a dead worker's partitions shows
    before another worker has taken it over."""
    resumed: dict[int, float] = {}
    for when, partition in written:
        if when > at_wall:
            resumed[partition] = min(resumed.get(partition, float("inf")), when - at_wall)
    return resumed


HIGHWATER_ROW = re.compile(r"^\|\s*(\S+-changelog)\s*\|\s*(\d+)\s*\|\s*(-?\d+)\s*\|")


def offsets_to_recover(log: Path) -> int:
    """Offsets the first recovery in ``log`` had to read to its highwaters, active and
    standby, from an empty store (an upper bound on records: compaction leaves gaps)."""
    total, inside = 0, False
    for line in log.read_text(errors="replace").splitlines():
        if "Highwater for active changelog partitions" in line or (
            "Highwater for standby changelog partitions" in line
        ):
            inside = True
            continue
        if inside and (m := HIGHWATER_ROW.match(line)) is not None:
            total += int(m.group(3)) + 1
        elif inside and not line.startswith(("|", "+")):
            inside = False
        if "Done reading from changelog topics" in line:
            break
    return total


def shortened_changelog_config(seconds: float, segment_s: float = 0) -> dict[str, str]:
    """The changelogs' compaction timings scaled down to a retention of ``seconds`` (the
    soak's; CHANGELOG_CONFIG has the production ones and why): segments roll and are
    compacted within a few retentions, tombstones kept one. Segments roll every
    ``segment_s`` if given, otherwise at a quarter of the retention, as in production."""
    ms = str(int(seconds * 1000))
    return {
        "segment.ms": str(int(segment_s * 1000 or seconds * 250)),
        "max.compaction.lag.ms": str(int(seconds * 2000)),
        "delete.retention.ms": ms,
    }


async def shorten_changelogs(
    settings: Settings, channels: Sequence[str], seconds: float, segment_s: float = 0
) -> None:
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        # alter_configs replaces a topic's dynamic configs whole: every one is given.
        config = {**CHANGELOG_CONFIG, **shortened_changelog_config(seconds, segment_s)}
        await admin.alter_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, changelog_topic(settings, c), config)
                for c in channels
            ]
        )
    finally:
        await admin.close()
