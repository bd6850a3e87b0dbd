"""The ``orders`` read model: one row per order, its lines, total and current status."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sagas.contracts import orders
from sagas.machinery.versions import FIRST
from sagas.projections.declare import (
    SAGA_VERSION,
    Column,
    Constant,
    EntityId,
    Index,
    Integer,
    JsonList,
    Latest,
    LatestSequence,
    LatestTime,
    Money,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row


class OrderRow(Row):
    order_id: str
    customer_id: str
    status: str
    reason: str | None
    lines: tuple[orders.OrderLine, ...]
    total: Decimal
    payment_method: str
    created_at: datetime
    updated_at: datetime
    last_sequence: int
    version: int = FIRST


_PLACED, _CHANGED = orders.OrderPlaced, orders.OrderStatusChanged

ORDERS: ReadModel[OrderRow] = ReadModel(
    name="orders",
    entity_type="order",
    row_type=OrderRow,
    key="order_id",
    starts=_PLACED,
    columns=(
        Column("order_id", Text(64), EntityId()),
        Column("customer_id", Text(100), Latest(_PLACED, "customer_id")),
        Column("status", Text(20), OrElse(Latest(_CHANGED, "status"), Constant("PENDING"))),
        Column("reason", Text(), Latest(_CHANGED, "reason"), nullable=True),
        Column("lines", JsonList(), Latest(_PLACED, "lines"), comment="JSON array of order lines"),
        Column("total", Money(14, 2), Latest(_PLACED, "total")),
        Column("payment_method", Text(50), Latest(_PLACED, "payment_method")),
        Column("created_at", Timestamp(), LatestTime(_PLACED)),
        Column("updated_at", Timestamp(), OrElse(LatestTime(_CHANGED), LatestTime(_PLACED))),
        Column("last_sequence", Integer(), LatestSequence()),
        SAGA_VERSION,
    ),
    # The customer order history (a category projection across order streams) is served
    # from this index: a customer's orders, newest first.
    indexes=(
        Index(
            "ix_orders_customer_created",
            ("customer_id", "created_at"),
            descending=frozenset({"created_at"}),
        ),
        # The console's and GET /sagas' saga list: newest change first, keyset-paged on
        # (updated_at, order_id), over every order or over one status (and the overview's
        # counts per status and time window).
        Index("ix_orders_updated", ("updated_at", "order_id")),
        Index("ix_orders_status_updated", ("status", "updated_at", "order_id")),
        # The list filtered by version (one range per status) and the counts per version.
        Index("ix_orders_status_version", ("status", "version", "updated_at", "order_id")),
    ),
)

apply_order = ORDERS.fold
"""Derived from the columns; components reach it as ``ORDERS.fold``."""
