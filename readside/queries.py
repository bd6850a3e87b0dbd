"""What the API reads: plain SELECTs over the read-model tables, never the domain model.

List orders follow :mod:`sagas.projections.listing` (tests compare the two).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from readside import codec, schema
from readside.store import in_chunks
from sagas.contracts.orders import FINAL_STATUSES
from sagas.projections.rows import OrderRow, StockRow, TimelineRow


def get_order(conn: Connection, order_id: str) -> OrderRow | None:
    t = schema.orders
    row = conn.execute(select(t).where(t.c.order_id == order_id)).first()
    return None if row is None else codec.order_row(row._mapping)


def customer_orders(conn: Connection, customer_id: str, limit: int) -> list[OrderRow]:
    """Newest first, as :func:`sagas.projections.listing.customer_history`."""
    t = schema.orders
    query = (
        select(t)
        .where(t.c.customer_id == customer_id)
        .order_by(t.c.created_at.desc(), t.c.order_id.desc())
        .limit(limit)
    )
    return [codec.order_row(row._mapping) for row in conn.execute(query)]


def get_stock(conn: Connection, product_id: str) -> StockRow | None:
    t = schema.product_stock
    row = conn.execute(select(t).where(t.c.product_id == product_id)).first()
    return None if row is None else codec.stock_row(row._mapping)


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


def final_orders_among(conn: Connection, order_ids: Collection[str]) -> set[str]:
    t = schema.orders
    final = t.c.status.in_(sorted(FINAL_STATUSES))
    found: set[str] = set()
    for chunk in in_chunks(order_ids):
        query = select(t.c.order_id).where(t.c.order_id.in_(chunk), final)
        found.update(conn.execute(query).scalars())
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
