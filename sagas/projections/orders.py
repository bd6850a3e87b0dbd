"""The ``orders`` read model: one row per order, its lines, total and current status."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sagas.contracts import orders
from sagas.messages import Envelope
from sagas.projections.declare import (
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
from sagas.projections.rows import Row, entity_id


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


def apply_order(row: OrderRow | None, event: Envelope) -> OrderRow | None:
    message = event.message()
    seq = event.sequence or 0
    if isinstance(message, orders.OrderPlaced):
        return OrderRow(
            order_id=entity_id(event),
            customer_id=message.customer_id,
            status="PENDING",
            reason=None,
            lines=message.lines,
            total=message.total,
            payment_method=message.payment_method,
            created_at=event.occurred_at,
            updated_at=event.occurred_at,
            last_sequence=seq,
        )
    if row is None:
        return None  # e.g. a cancel that overtook its order: no order to show
    update: dict[str, object] = {"last_sequence": seq}
    if isinstance(message, orders.OrderStatusChanged):
        update |= {
            "status": message.status,
            "reason": message.reason,
            "updated_at": event.occurred_at,
        }
    return row.model_copy(update=update)


_PLACED, _CHANGED = orders.OrderPlaced, orders.OrderStatusChanged

ORDERS: ReadModel[OrderRow] = ReadModel(
    name="orders",
    entity_type="order",
    row_type=OrderRow,
    fold=apply_order,
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
    ),
)
