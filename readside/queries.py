"""What the API reads: plain SELECTs over the read-model tables, never the domain model.

Every model is read the same way, through its declaration; list orders follow
:mod:`sagas.projections.listing` (tests compare the two).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import (
    BigInteger,
    Connection,
    DateTime,
    String,
    Text,
    case,
    column,
    func,
    literal,
    select,
    table,
    tuple_,
)

from readside import codec, schema
from readside.store import in_chunks
from sagas.messages import Message
from sagas.projections.declare import ReadModel, SagaType
from sagas.projections.rows import TimelineRow

R = TypeVar("R", bound=BaseModel)


def get_row(conn: Connection, model: ReadModel[R], entity_id: str) -> R | None:
    """An entity's row in ``model``."""
    t = schema.table_of(model)
    row = conn.execute(select(t).where(t.c[model.key] == entity_id)).first()
    row_of: R | None = None if row is None else codec.row_of(model, row._mapping)
    return row_of


def rows_where(
    conn: Connection, model: ReadModel[R], column: str, value: str, newest_by: str, limit: int
) -> list[R]:
    """The rows whose ``column`` is ``value``, newest first by ``newest_by`` (the key breaks
    ties, descending too)."""
    t = schema.table_of(model)
    query = (
        select(t)
        .where(t.c[column] == value)
        .order_by(t.c[newest_by].desc(), t.c[model.key].desc())
        .limit(limit)
    )
    return [codec.row_of(model, row._mapping) for row in conn.execute(query)]


def saga_timeline(conn: Connection, saga_id: str) -> list[TimelineRow]:
    """Oldest first, as :func:`sagas.projections.listing.saga_timeline`."""
    t = schema.saga_timeline
    query = (
        select(t)
        .where(t.c.saga_id == saga_id)
        .order_by(t.c.occurred_at, t.c.entity_key, t.c.sequence)
    )
    return [codec.timeline_row(row._mapping) for row in conn.execute(query)]


def checkpoints(conn: Connection, topic: str) -> dict[int, int]:
    t = schema.projection_checkpoints
    rows = conn.execute(select(t.c.partition, t.c.next_offset).where(t.c.topic == topic))
    return {partition: offset for partition, offset in rows}


@dataclass(frozen=True)
class Held:
    count: int
    oldest_since: datetime | None


def held_events(conn: Connection) -> Held:
    t = schema.pending_events
    count, oldest = conn.execute(select(func.count(), func.min(t.c.held_since))).one()
    return Held(int(count), None if oldest is None else codec.utc(oldest))


def counters(conn: Connection) -> dict[str, int]:
    t = schema.projection_counters
    return {name: int(value) for name, value in conn.execute(select(t.c.name, t.c.value))}


def receipts_among(conn: Connection, command_ids: Collection[str]) -> set[str]:
    t = schema.command_receipts
    found: set[str] = set()
    for chunk in in_chunks(command_ids):
        found.update(
            conn.execute(select(t.c.command_id).where(t.c.command_id.in_(chunk))).scalars()
        )
    return found


def settled_among(conn: Connection, saga: SagaType, saga_ids: Collection[str]) -> set[str]:
    """The sagas of ``saga``'s type among ``saga_ids`` whose status is settled (what
    ``?wait=`` waits for; for a saga that declares no resting status, the final ones)."""
    t = schema.table_of(saga.model)
    key = t.c[saga.model.key]
    settled = t.c[saga.status_column].in_(sorted(saga.statuses.settled))
    found: set[str] = set()
    for chunk in in_chunks(saga_ids):
        found.update(conn.execute(select(key).where(key.in_(chunk), settled)).scalars())
    return found


@dataclass(frozen=True)
class Stuck:
    count: int
    examples: list[tuple[str, int]]
    """(entity key, sequence) of the longest-held events."""


def held_before(conn: Connection, since: datetime, examples: int = 5) -> Stuck:
    """Events held behind a gap since before ``since``."""
    t = schema.pending_events
    old = t.c.held_since < codec.utc(since)
    count = conn.execute(select(func.count()).where(old)).scalar_one()
    query = select(t.c.entity_key, t.c.sequence).where(old).order_by(t.c.held_since)
    rows = conn.execute(query.limit(examples)).all()
    return Stuck(int(count), [(key, seq) for key, seq in rows])


def rows_in_statuses(
    conn: Connection, saga: SagaType, statuses: Collection[str], reason: str | None, limit: int
) -> list[Any]:
    """Rows of ``saga``'s model in one of ``statuses`` (with exactly ``reason`` when one is
    given), newest first by the saga's ``updated_column`` (the key breaks ties)."""
    if not statuses:
        return []
    model = saga.model
    t = schema.table_of(model)
    query = select(t).where(t.c[saga.status_column].in_(sorted(statuses)))
    if reason is not None:
        query = query.where(t.c[saga.reason_column] == reason)
    query = query.order_by(t.c[saga.updated_column].desc(), t.c[model.key].desc()).limit(limit)
    return [codec.row_of(model, row._mapping) for row in conn.execute(query)]


def reasons_in_statuses(
    conn: Connection, saga: SagaType, statuses: Collection[str], limit: int = 100
) -> list[str]:
    """The distinct reasons of ``saga``'s rows in ``statuses``, most frequent first (what a
    reason filter offers)."""
    if not statuses:
        return []
    t = schema.table_of(saga.model)
    reason = t.c[saga.reason_column]
    query = (
        select(reason, func.count().label("n"))
        .where(t.c[saga.status_column].in_(sorted(statuses)), reason.isnot(None))
        .group_by(reason)
        .order_by(func.count().desc(), reason)
        .limit(limit)
    )
    return [str(r) for r, _n in conn.execute(query)]


# The Spark rebuild's run log (migrations 0002). Its table belongs to spark_projections, which
# the read side may not import; these few columns are all the read side needs of it.
_rebuild_runs = table(
    "rebuild_runs",
    column("run_id", String(36)),
    column("topic", String(200)),
    # Typed, so SQLite's stored text comes back as a datetime.
    column("started_at", DateTime(timezone=True)),
    column("swapped_at", DateTime(timezone=True)),
    column("events_read", BigInteger()),
    column("rows", Text()),
)


@dataclass(frozen=True)
class RebuildRun:
    """A rebuild that swapped its models in (the only runs recorded)."""

    run_id: str
    topic: str
    started_at: datetime
    swapped_at: datetime
    events_read: int
    rows: dict[str, int]
    """Rows swapped in, per table."""

    @property
    def duration_s(self) -> float:
        return (self.swapped_at - self.started_at).total_seconds()


def last_rebuild(conn: Connection) -> RebuildRun | None:
    """The most recent swapped rebuild, None when none has run."""
    t = _rebuild_runs
    query = select(t).order_by(t.c.swapped_at.desc(), t.c.run_id.desc()).limit(1)
    row = conn.execute(query).first()
    if row is None:
        return None
    m = row._mapping
    return RebuildRun(
        run_id=str(m["run_id"]),
        topic=str(m["topic"]),
        started_at=codec.utc(m["started_at"]),
        swapped_at=codec.utc(m["swapped_at"]),
        events_read=int(m["events_read"]),
        rows={str(k): int(v) for k, v in json.loads(m["rows"]).items()},
    )


_rebuild_failures = table(
    "rebuild_failures",
    column("run_id", String(36)),
    column("started_at", DateTime(timezone=True)),
    column("failed_at", DateTime(timezone=True)),
    column("stage", String(40)),
    column("error", Text()),
)


@dataclass(frozen=True)
class RebuildFailure:
    """A rebuild that ended without swapping (migration 0004; the Spark job records it)."""

    run_id: str
    started_at: datetime
    failed_at: datetime
    stage: str
    error: str


def last_rebuild_failure(conn: Connection) -> RebuildFailure | None:
    t = _rebuild_failures
    query = select(t).order_by(t.c.failed_at.desc(), t.c.run_id.desc()).limit(1)
    row = conn.execute(query).first()
    if row is None:
        return None
    m = row._mapping
    return RebuildFailure(
        run_id=str(m["run_id"]),
        started_at=codec.utc(m["started_at"]),
        failed_at=codec.utc(m["failed_at"]),
        stage=str(m["stage"]),
        error=str(m["error"]),
    )


@dataclass(frozen=True)
class RebuildHistory:
    """The last swapped rebuild and the last failed one; the later of the two is the last
    attempt's result."""

    swapped: RebuildRun | None
    failed: RebuildFailure | None

    @property
    def last_result(self) -> str | None:
        """``swapped``, ``failed``, or None when no rebuild is recorded."""
        if self.failed is None:
            return None if self.swapped is None else "swapped"
        if self.swapped is None or self.failed.failed_at > self.swapped.swapped_at:
            return "failed"
        return "swapped"


def rebuild_history(conn: Connection) -> RebuildHistory:
    return RebuildHistory(last_rebuild(conn), last_rebuild_failure(conn))


# --- the saga list and the overview (issue 32) -----------------------------------------


def compensation_types() -> list[str]:
    """The event types whose contract declares ``COMPENSATION`` (a step undone)."""
    return sorted(t for t, m in Message.known_types().items() if m.COMPENSATION)


def _compensated(saga: SagaType) -> Any:
    t, tl = schema.table_of(saga.model), schema.saga_timeline
    return (
        select(tl.c.saga_id)
        .where(tl.c.saga_id == t.c[saga.model.key], tl.c.event_type.in_(compensation_types()))
        .exists()
    )


TOUCHED_IDS = 5000
"""Up to this many sagas of an entity are fetched by key (see :func:`saga_rows`)."""


@dataclass(frozen=True)
class Below:
    """Where a keyset page of one saga type's rows starts: strictly below ``(at, saga_id)``
    in (updated_at, key) order, descending; ``saga_id`` None: every row changed at ``at``
    comes too (``inclusive``) or none does."""

    at: datetime
    saga_id: str | None = None
    inclusive: bool = False


def saga_rows(
    conn: Connection,
    saga: SagaType,
    *,
    status: str | None,
    limit: int,
    version: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    equals: Mapping[str, str] | None = None,
    touching: str | None = None,
    compensated: bool | None = None,
    below: Below | None = None,
) -> list[Any]:
    """Rows of ``saga``'s model, most recently changed first (the key, descending, breaks
    ties): in ``status`` and of ``version`` when given, changed in [``since``, ``until``),
    with each ``equals`` column holding its value, that touched entity ``touching`` (their
    timeline holds an event of that entity key), with or without a compensation in their
    timeline, and below ``below``. Served by the (status, updated_at, key), (status,
    version, updated_at, key) and (updated_at, key) indexes: a page reads ``limit`` index
    entries past its start, however many rows match further down."""
    model = saga.model
    t = schema.table_of(model)
    at, key = t.c[saga.updated_column], t.c[model.key]
    query = select(t)
    if status is not None:
        query = query.where(t.c[saga.status_column] == status)
    if version is not None:
        query = query.where(t.c[saga.version_column] == version)
    if since is not None:
        query = query.where(at >= codec.utc(since))
    if until is not None:
        query = query.where(at < codec.utc(until))
    for name, value in (equals or {}).items():
        query = query.where(t.c[name] == value)
    by_key: int | None = None
    if touching is not None:
        tl = schema.saga_timeline
        sagas = select(tl.c.saga_id).where(tl.c.entity_key == touching).distinct()
        found = conn.execute(sagas.limit(TOUCHED_IDS + 1)).scalars().all()
        if not found:
            return []
        # The ids first, then their rows by key (below). With a subquery, or with the ids
        # and ORDER BY ... LIMIT, PostgreSQL may walk the whole (updated_at, key) index
        # looking for them (200 ms at a million sagas when the other type has none). An
        # entity of more sagas keeps the subquery.
        if len(found) <= TOUCHED_IDS:
            query, by_key = query.where(key.in_(found)), len(found)
        else:
            query = query.where(key.in_(sagas))
    if compensated is not None:
        exists = _compensated(saga)
        query = query.where(exists if compensated else ~exists)
    if below is not None:
        edge = codec.utc(below.at)
        if below.saga_id is not None:
            edge_key = literal(below.saga_id, key.type)
            query = query.where(tuple_(at, key) < tuple_(literal(edge, at.type), edge_key))
        elif below.inclusive:
            query = query.where(at <= edge)
        else:
            query = query.where(at < edge)
    if by_key is not None:
        # A LIMIT inside is a fence: the rows are found by key, then sorted.
        inner = query.limit(by_key).subquery()
        outer = select(inner).order_by(
            inner.c[saga.updated_column].desc(), inner.c[model.key].desc()
        )
        return [codec.row_of(model, row._mapping) for row in conn.execute(outer.limit(limit))]
    query = query.order_by(at.desc(), key.desc()).limit(limit)
    return [codec.row_of(model, row._mapping) for row in conn.execute(query)]


Split = dict[tuple[str, int], tuple[int, int]]
"""(status, version) -> (rows, of which some part): a count per saga version too."""


def status_counts(conn: Connection, saga: SagaType, since: datetime, split: datetime) -> Split:
    """Per status and version, (rows changed since ``since``, of which since ``split``)."""
    t = schema.table_of(saga.model)
    at, status = t.c[saga.updated_column], t.c[saga.status_column]
    version = t.c[saga.version_column]
    recent = func.coalesce(func.sum(case((at >= codec.utc(split), 1), else_=0)), 0)
    # Every status named: PostgreSQL then counts from the (status, ...) indexes alone.
    every = status.in_(saga.statuses.statuses)
    query = select(status, version, func.count(), recent).where(every, at >= codec.utc(since))
    rows = conn.execute(query.group_by(status, version))
    return {(str(s), int(v)): (int(n), int(r)) for s, v, n, r in rows}


def open_counts(
    conn: Connection, saga: SagaType, statuses: Collection[str], stuck_before: datetime
) -> Split:
    """Per status among ``statuses`` and version, (every row in it, of which unchanged since
    before ``stuck_before``): what is in flight now, and what of it is stuck."""
    if not statuses:
        return {}
    t = schema.table_of(saga.model)
    at, status = t.c[saga.updated_column], t.c[saga.status_column]
    version = t.c[saga.version_column]
    old = func.coalesce(func.sum(case((at < codec.utc(stuck_before), 1), else_=0)), 0)
    query = select(status, version, func.count(), old).where(status.in_(sorted(statuses)))
    rows = conn.execute(query.group_by(status, version))
    return {(str(s), int(v)): (int(n), int(o)) for s, v, n, o in rows}


def compensated_counts(
    conn: Connection, saga: SagaType, statuses: Collection[str], since: datetime, split: datetime
) -> dict[int, tuple[int, int]]:
    """Per version, the rows in ``statuses`` changed since ``since`` whose timeline holds a
    compensation (and of those, since ``split``)."""
    if not statuses:
        return {}
    t = schema.table_of(saga.model)
    at, status = t.c[saga.updated_column], t.c[saga.status_column]
    version = t.c[saga.version_column]
    recent = func.coalesce(func.sum(case((at >= codec.utc(split), 1), else_=0)), 0)
    query = select(version, func.count(), recent).where(
        status.in_(sorted(statuses)), at >= codec.utc(since), _compensated(saga)
    )
    rows = conn.execute(query.group_by(version))
    return {int(v): (int(n), int(r)) for v, n, r in rows}


def settled_since(
    conn: Connection, saga: SagaType, statuses: Collection[str], since: datetime
) -> list[tuple[datetime, datetime]]:
    """(started, last changed) of the rows in ``statuses`` changed since ``since``: what
    the overview's throughput and latency charts are drawn from."""
    if not statuses:
        return []
    t = schema.table_of(saga.model)
    at, status = t.c[saga.updated_column], t.c[saga.status_column]
    created = t.c.get("created_at", at)
    query = select(created, at).where(status.in_(sorted(statuses)), at >= codec.utc(since))
    return [(codec.utc(c), codec.utc(u)) for c, u in conn.execute(query)]


def compensated_among(conn: Connection, saga_ids: Collection[str]) -> set[str]:
    """The sagas among ``saga_ids`` whose timeline holds a compensation."""
    tl = schema.saga_timeline
    found: set[str] = set()
    for chunk in in_chunks(saga_ids):
        query = select(tl.c.saga_id).where(
            tl.c.saga_id.in_(chunk), tl.c.event_type.in_(compensation_types())
        )
        found.update(conn.execute(query.distinct()).scalars())
    return found


def recent_reasons(
    conn: Connection, saga: SagaType, statuses: Collection[str], recent: int, limit: int = 100
) -> list[str]:
    """The distinct reasons of ``saga``'s ``recent`` most recently changed rows in each of
    ``statuses``, most frequent first (what a reason filter offers): one index range per
    status, however many rows are in it (:func:`reasons_in_statuses` counts them all)."""
    t = schema.table_of(saga.model)
    at, status = t.c[saga.updated_column], t.c[saga.status_column]
    reason = t.c[saga.reason_column]
    counts: dict[str, int] = {}
    for name in sorted(statuses):
        query = select(reason).where(status == name).order_by(at.desc()).limit(recent)
        for (text_,) in conn.execute(query):
            if text_ is not None:
                counts[str(text_)] = counts.get(str(text_), 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [r for r, _n in ranked[:limit]]
