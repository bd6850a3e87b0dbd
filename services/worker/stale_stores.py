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

A store is judged each time an assignment gives its partition back, not only at the
worker's start: a worker that runs for weeks closes a partition's store when a rebalance
takes the partition away and keeps it on disk, and the partition may come back days later
(soak soaka21559: a store closed for nine minutes under a 60 s tombstone retention brought
retired sagas back to an older step, and they decided that step again).
:func:`judge_at_start` asks the broker before Faust starts; :func:`judge_stores_on_assignment`
then runs before Faust opens the stores of each assignment, over every partition it gives
that the previous one did not, without asking the broker again. The age allowed follows the
retention the broker holds for the changelogs (:func:`runtime.topics.tombstone_retention`),
not the one Sagaline declares.
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
    partition_stores,
    table_dirs,
)

log = logging.getLogger(__name__)


MARGIN_FLOOR = timedelta(minutes=10)
"""The least of the margin below: the clocks of the worker that wrote a record and of this one,
the judgement's own time, and the recovery's, which must read a tombstone before the broker
may remove it."""


def max_age(retention: timedelta) -> timedelta:
    """How old a store's last applied record may be under a tombstone ``retention``: the
    retention less a twenty-fourth of it (an hour of the default day), and less at least
    :data:`MARGIN_FLOOR`. Negative under a retention of ten minutes or less: every store is
    then discarded."""
    return retention - max(retention / 24, MARGIN_FLOOR)


MAX_AGE = max_age(timedelta(milliseconds=int(CHANGELOG_CONFIG["delete.retention.ms"])))
"""The age allowed under the retention Sagaline declares for its changelogs."""


@dataclass(frozen=True)
class LocalStore:
    path: Path
    changelog: str
    partition: int
    persisted: int


def _tp(store: LocalStore) -> TopicPartition:
    return TopicPartition(store.changelog, store.partition)


def stale(
    stores: list[LocalStore],
    written_at: Mapping[TopicPartition, datetime],
    now: datetime,
    max_age: timedelta,
) -> list[tuple[LocalStore, str]]:
    """The stores to discard, each with the reason."""
    found = []
    for store in stores:
        when = written_at.get(_tp(store))
        if when is None:
            found.append((store, f"its last record (offset {store.persisted}) is gone"))
        elif now - when > max_age:
            found.append((store, f"its last record was written {now - when} ago"))
    return found


def persisted_offset(path: Path) -> int | None:
    """The changelog offset a table partition's RocksDB at ``path`` last applied, if any."""
    options = Options(raw_mode=True)
    options.set_max_open_files(16)  # one key is read: not every SST file kept open
    db = Rdict(str(path), options, access_type=AccessType.read_only())
    try:
        raw = db.get(PERSISTED_OFFSET_KEY)
    finally:
        db.close()
    return None if raw is None else int(raw)


@dataclass
class Currency:
    """When each local store was last known to hold its changelog up to date, and the age
    allowed: what the worker judged at its start (from the broker), then kept current
    without asking the broker again while it runs."""

    max_age: timedelta
    as_of: dict[Path, datetime]


async def judge_at_start(
    settings: Settings, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> Currency:
    """Judge every store under ``settings.data_dir`` before Faust starts (the broker asked:
    the changelogs' retention and each store's last record), discard the stale ones, and
    say how current the others are."""
    returning = [
        Returning(None, f"{settings.app_id}-{table}-changelog", partition, path)
        for tables_dir in table_dirs(settings.data_dir)
        for table, partition, path in partition_stores(tables_dir)
    ]
    retention = await tombstone_retention(settings)
    known: dict[Path, datetime] = {}
    from_broker = _asker(settings, retention)

    async def ask(stores: list[LocalStore]) -> tuple[timedelta, dict[TopicPartition, datetime]]:
        _, written = await from_broker(stores)
        known.update({s.path: t for s in stores if (t := written.get(_tp(s)))})
        return retention, written

    await judge(settings, returning, ask, clock)
    kept = {path: when for path, when in known.items() if path.exists()}
    return Currency(max_age(retention), kept)


def judge_stores_on_assignment(app: faust.App, currency: Currency) -> None:
    """Judge the stores of each assignment before Faust opens them (the module's docstring),
    without asking the broker: the rebalance must not wait on it (with the broker asked
    here, the fault harness found standbys whose stores skipped changelog records, in 4 of
    44 cycles against none in 26 without: RELIABILITY.md, defect 10). A partition the
    assignment gives that the previous did not is reopened only if its store was current
    within the age allowed: as of its last record when judged at the start, as of the
    assignment that took the partition away when it was held here since (an active store is
    current until then; a standby's lags by its fetch, which the ten-minute floor of the
    margin covers). Any other store of it is discarded, and an open database of it closed
    first."""
    tables: Any = app.tables
    on_rebalance = tables.on_rebalance
    held_before: set[TopicPartition] = set()

    async def judged(
        assigned: set[Any], revoked: set[Any], newly_assigned: set[Any], generation_id: int = 0
    ) -> None:
        nonlocal held_before
        now = datetime.now(UTC)
        held = set(app.assignor.assigned_actives()) | set(app.assignor.assigned_standbys())
        for one in _stores_of(tables.values(), held_before - held, present=False):
            currency.as_of[one.path] = now  # current until this assignment took it away
        for one in _stores_of(tables.values(), held - held_before, present=True):
            as_of = currency.as_of.pop(one.path, None)
            if as_of is None or now - as_of > currency.max_age:
                _close(one)
                # In a thread: the loop it would hold runs the consumer's heartbeats.
                await asyncio.to_thread(_remove, one.path)
                reason = (
                    "not known to be current"
                    if as_of is None
                    else f"current as of {now - as_of} ago"
                )
                log.warning(
                    "discarded the local store %s: %s; Faust recovers it from its changelog",
                    one.path.name,
                    reason,
                )
        held_before = held
        await on_rebalance(assigned, revoked, newly_assigned, generation_id)

    tables.on_rebalance = judged


@dataclass(frozen=True)
class Returning:
    """A table partition's local store, to be judged before it is opened again."""

    store: Any
    """Faust's RocksDB store of the table (its open databases are ``_dbs``); None for a store
    no running Faust holds (at a worker's start, before Faust, or a stopped worker's)."""
    changelog: str
    partition: int
    path: Path


def _stores_of(
    tables: Iterable[Any], partitions: set[TopicPartition], present: bool
) -> list[Returning]:
    """The stores of ``partitions`` among ``tables``' (Faust tables), those on disk only if
    ``present``."""
    found = []
    for table in tables:
        store = table.data
        if not is_rocksdict_store(store):
            continue
        changelog = table.changelog_topic.get_topic_name()
        for tp in partitions:
            path = Path(store.partition_path(tp.partition))
            if tp.topic == changelog and (path.exists() or not present):
                found.append(Returning(store, changelog, tp.partition, path))
    return found


JUDGE_TIMEOUT_S = 15.0
"""How long a judgement waits for the broker's answers (a describe and one record per store,
well under a second when it is up) before it discards the stores unjudged."""


Ask = Callable[[list[LocalStore]], Awaitable[tuple[timedelta, dict[TopicPartition, datetime]]]]
"""The changelogs' tombstone retention, and when the record at each store's persisted offset
was written (a record that is not there, compacted away, left out)."""


async def judge(
    settings: Settings,
    returning: list[Returning],
    ask: Ask | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[str]:
    """Discard each of ``returning`` that is stale, unreadable or holds no persisted offset,
    or every one of them when the broker cannot say (``ask``: from the broker unless given).
    Returns a line for each store discarded."""
    if not returning:
        return []
    for one in returning:
        _close(one)
    readable, unreadable = await asyncio.to_thread(_read, returning)
    why = {one.path: reason for one, reason in unreadable}
    if readable:
        stores = [store for _, store in readable]
        try:
            async with asyncio.timeout(JUDGE_TIMEOUT_S):
                retention, written = await (ask or _asker(settings))(stores)
            now = clock()  # after the answers: the age is not understated
            why.update(
                {s.path: reason for s, reason in stale(stores, written, now, max_age(retention))}
            )
        except Exception as exc:  # any failure: recovering from the changelog is always right
            why.update({s.path: f"the broker could not judge it ({exc!r})" for s in stores})
    lines = []
    for one in returning:
        if (reason := why.get(one.path)) is not None:
            _close(one)  # opened while the broker was asked
            await asyncio.to_thread(_remove, one.path)
            line = (
                f"discarded the local store {one.path.name}: {reason}; Faust recovers it "
                "from its changelog"
            )
            log.warning(line)
            lines.append(line)
    return lines


def _close(one: Returning) -> None:
    """Close the partition's database if the store has it open: a partition taken away may
    have been read since (Faust closes it only at the revocation), and it is judged, and
    opened again by Faust, from its files."""
    db = None if one.store is None else one.store._dbs.pop(one.partition, None)
    if db is not None:
        db.close()


def _read(
    returning: list[Returning],
) -> tuple[list[tuple[Returning, LocalStore]], list[tuple[Returning, str]]]:
    """Each store's persisted offset, or why it has none to judge."""
    readable: list[tuple[Returning, LocalStore]] = []
    unreadable: list[tuple[Returning, str]] = []
    for one in returning:
        try:
            persisted = persisted_offset(one.path)
        except Exception as exc:
            unreadable.append((one, f"it cannot be read ({exc})"))
            continue
        if persisted is None:
            unreadable.append((one, "it holds no persisted offset"))
        else:
            readable.append((one, LocalStore(one.path, one.changelog, one.partition, persisted)))
    return readable, unreadable


def _remove(path: Path) -> None:
    """Rename the directory aside, then remove it: a crash in between leaves no half store
    under the partition's name (Faust would refuse to open one)."""
    aside = path.with_name(f".{path.name}.discarded")
    shutil.rmtree(aside, ignore_errors=True)
    path.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)


def _asker(settings: Settings, retention: timedelta | None = None) -> Ask:
    """Ask the broker (the retention too, unless given)."""

    async def ask(stores: list[LocalStore]) -> tuple[timedelta, dict[TopicPartition, datetime]]:
        held = retention if retention is not None else await tombstone_retention(settings)
        return held, await _written_at(settings, {_tp(s): s.persisted for s in stores})

    return ask


async def _written_at(
    settings: Settings, offsets: Mapping[TopicPartition, int], timeout_s: float = 10.0
) -> dict[TopicPartition, datetime]:
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    found: dict[TopicPartition, datetime] = {}
    try:
        await consumer.start()
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
        if waiting:
            raise TimeoutError(f"{len(waiting)} changelog partition(s) not read in {timeout_s} s")
    finally:
        await consumer.stop()
    return found
