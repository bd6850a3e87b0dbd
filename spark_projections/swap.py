"""The swap: staging tables become the live read models, with the new checkpoints, in ONE
transaction. Readers and the projector see either every old table or every new one.

PostgreSQL: ``LOCK TABLE`` every table the swap touches (in the order the projector's batch
touches them, so the two cannot deadlock), then drop each live table and rename its staging
table in (DDL is transactional; the renames take milliseconds whatever the size).
SQLite: ``BEGIN IMMEDIATE`` takes the single write lock (WAL readers keep reading the old
snapshot), then each live table is emptied and refilled from its staging table.

Inside that transaction, with the projector held off: the live checkpoints are read, the
events the projector applied past the rebuild's ends are applied again on top of the new
models (:mod:`spark_projections.catchup`), the new checkpoints and counters are written,
command receipts past the new checkpoints are dropped (the projector re-creates them as it
re-applies) and the rebuilt ones merged in, and held events still held keep the time the
projector first held them.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, event, insert, select, text
from sqlalchemy.exc import DBAPIError

from readside import schema, store
from readside.engine import create_read_engine
from spark_projections import catchup, pipeline, staging, tables
from spark_projections.read import Offsets

log = logging.getLogger(__name__)

STAGED = tuple(t.table for t in pipeline.STAGED_TABLES)
"""Every table the rebuild stages (:data:`spark_projections.pipeline.STAGED_TABLES`)."""
MERGED = (schema.command_receipts,)
"""Staged, then merged into the live table (it also holds receipts past the rebuild)."""
REPLACED = tuple(t for t in STAGED if t not in MERGED)
"""Rebuilt from staging and swapped in whole."""
LOCK_ORDER = (
    schema.entity_positions,
    schema.pending_events,
    *schema.MODEL_TABLES.values(),  # in sagas.catalog.READ_MODELS order
    schema.saga_timeline,
    schema.command_receipts,
    schema.projection_checkpoints,
    schema.projection_counters,
    *tables.REBUILD_TABLES,
    tables.rebuild_runs,
)
"""Same order as a projector batch's statements (:func:`readside.batch.apply_batch`: the
positions and held events, the declared models' rows, the timeline, receipts, checkpoints,
counters): two lockers in one order never deadlock."""
ATTEMPTS = 5


@dataclass
class Handover:
    """What the swap did, for the summary."""

    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    caught_up: dict[int, tuple[int, int]] = field(default_factory=dict)
    caught_up_records: int = 0
    checkpoints: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class SwapInput:
    offsets: Offsets
    counters: Mapping[str, int]
    rows: Mapping[str, int]
    events_read: int
    started_at: datetime


def swap_engine(database_url: str) -> Engine:
    """An engine whose transactions take the write lock up front on SQLite."""
    engine = create_read_engine(database_url)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _manual(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves

        @event.listens_for(engine, "begin")
        def _immediate(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


Fetch = Callable[[Mapping[int, tuple[int, int]]], Sequence[catchup.Record]]
"""Reads the records of partition -> [start, end) from the topic."""


def swap(engine: Engine, given: SwapInput, fetch: Fetch) -> Handover:
    """Swap every staged table in; retried when PostgreSQL breaks a deadlock against us."""
    for attempt in range(1, ATTEMPTS + 1):
        handover = Handover()
        started = time.monotonic()
        try:
            with engine.begin() as conn:
                _swap(conn, given, handover, fetch)
        except DBAPIError as exc:
            if attempt == ATTEMPTS or not _retryable(exc):
                raise
            log.warning("swap attempt %d failed (%s); retrying", attempt, exc.orig)
            time.sleep(attempt)
            continue
        handover.seconds = time.monotonic() - started
        return handover
    raise AssertionError("unreachable")


def _retryable(exc: DBAPIError) -> bool:
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return code in {"40P01", "55P03", "40001"} or "locked" in str(exc.orig)


def _swap(
    conn: Connection,
    given: SwapInput,
    handover: Handover,
    fetch: Fetch,
) -> None:
    topic = given.offsets.topic
    _lock(conn)
    live = store.load_checkpoints(conn, topic)
    held_since = _live_held_since(conn)
    for table in REPLACED:
        _replace(conn, table)
    _write_checkpoints(conn, topic, given.offsets.nonempty())
    _write_counters(conn, given.counters)
    _merge_receipts(conn, given.offsets.end)
    _keep_held_since(conn, held_since)
    handover.caught_up = catchup.ranges(given.offsets.end, live)
    records = fetch(handover.caught_up)
    handover.caught_up_records = catchup.apply(
        conn, topic, records, given.offsets.nonempty(), datetime.now(UTC)
    )
    handover.checkpoints = store.load_checkpoints(conn, topic)
    _record_run(conn, given, handover)


def _lock(conn: Connection) -> None:
    if conn.dialect.name != "postgresql":
        return  # BEGIN IMMEDIATE (swap_engine) holds SQLite's only write lock already
    names = ", ".join(_q(conn, t.name) for t in LOCK_ORDER)
    conn.execute(text("SET LOCAL lock_timeout = '60s'"))
    conn.execute(text(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE"))


def _replace(conn: Connection, table: Table) -> None:
    live, staged = _q(conn, table.name), _q(conn, staging.staging_name(table))
    if conn.dialect.name == "postgresql":
        pk = _pk_name(conn, table.name)
        conn.execute(text(f"DROP TABLE {live}"))
        conn.execute(text(f"ALTER TABLE {staged} RENAME TO {live}"))
        staged_pk = _q(conn, f"{staging.staging_name(table)}_pkey")
        conn.execute(text(f"ALTER INDEX {staged_pk} RENAME TO {_q(conn, pk)}"))
        for index in table.indexes:
            old = _q(conn, f"{index.name}{staging.SUFFIX}")
            conn.execute(text(f"ALTER INDEX {old} RENAME TO {_q(conn, str(index.name))}"))
        return
    columns = ", ".join(_q(conn, c.name) for c in table.columns)
    conn.execute(delete(table))
    conn.execute(text(f"INSERT INTO {live} ({columns}) SELECT {columns} FROM {staged}"))


def _pk_name(conn: Connection, table_name: str) -> str:
    query = text(
        "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:t) AND contype = 'p'"
    )
    return str(conn.execute(query, {"t": table_name}).scalar_one())


def _write_checkpoints(conn: Connection, topic: str, ends: Mapping[int, int]) -> None:
    t = schema.projection_checkpoints
    conn.execute(delete(t).where(t.c.topic == topic))
    store.save_checkpoints(conn, topic, ends)


def _write_counters(conn: Connection, counters: Mapping[str, int]) -> None:
    conn.execute(delete(schema.projection_counters))
    store.add_to_counters(conn, counters)


def _merge_receipts(conn: Connection, ends: Mapping[int, int]) -> None:
    """Drop receipts of events past the new checkpoints (not applied in the new models, and
    re-created when the projector re-applies them), then add the rebuilt ones missing."""
    t = schema.command_receipts
    for partition, end in ends.items():
        conn.execute(
            delete(t).where((t.c.topic_partition == partition) & (t.c.topic_offset >= end))
        )
    staged = _q(conn, staging.staging_name(t))
    columns = ", ".join(_q(conn, c.name) for c in t.columns)
    conn.execute(
        text(
            f"INSERT INTO {_q(conn, t.name)} ({columns}) SELECT {columns} FROM {staged} s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {_q(conn, t.name)} r "
            "WHERE r.command_id = s.command_id)"
        )
    )


def _live_held_since(conn: Connection) -> dict[tuple[str, int], datetime]:
    t = schema.pending_events
    query = select(t.c.entity_key, t.c.sequence, t.c.held_since).where(t.c.held_since.isnot(None))
    return {(k, s): since for k, s, since in conn.execute(query)}


def _keep_held_since(conn: Connection, held_since: Mapping[tuple[str, int], datetime]) -> None:
    """An event the projector holds already keeps the time it first held it."""
    if not held_since:
        return
    t = schema.pending_events
    still_held = {
        (k, s)
        for k, s in conn.execute(select(t.c.entity_key, t.c.sequence))
        if (k, s) in held_since
    }
    for key, sequence in sorted(still_held):
        conn.execute(
            t.update()
            .where((t.c.entity_key == key) & (t.c.sequence == sequence))
            .values(held_since=held_since[(key, sequence)])
        )


def _record_run(conn: Connection, given: SwapInput, handover: Handover) -> None:
    offsets = {p: [given.offsets.start[p], e] for p, e in sorted(given.offsets.end.items())}
    conn.execute(
        insert(tables.rebuild_runs).values(
            run_id=handover.run_id,
            topic=given.offsets.topic,
            started_at=given.started_at,
            swapped_at=datetime.now(UTC),
            offsets=json.dumps(offsets),
            caught_up=json.dumps({p: list(r) for p, r in handover.caught_up.items()}),
            events_read=given.events_read,
            rows=json.dumps(dict(given.rows), sort_keys=True),
        )
    )


def _q(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)
