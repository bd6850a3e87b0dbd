"""Read-model rows and the pure functions that fold events into them.

One function per model: ``apply_<model>(row | None, event) -> row | None``. A fold only
ever sees an entity's events in sequence order (see :mod:`sagas.projections.ordering`).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from sagas.contracts import ledger, orders, payment
from sagas.messages import Envelope, Message

ORDER = "order"
PRODUCT = "product"


class Row(BaseModel):
    model_config = ConfigDict(frozen=True)


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


class StockRow(Row):
    product_id: str
    on_hand: int
    reserved: int
    available: int
    updated_at: datetime
    last_sequence: int


class TimelineRow(Row):
    """One step of a saga: any event that names the saga, from any entity."""

    saga_id: str
    entity_key: str
    sequence: int
    event_type: str
    occurred_at: datetime
    summary: str


def entity_id(event: Envelope) -> str:
    return event.key.split(":", 1)[1]


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


def apply_stock(row: StockRow | None, event: Envelope) -> StockRow | None:
    message = event.message()
    if not isinstance(message, ledger.LedgerFact):
        return row
    return StockRow(
        product_id=entity_id(event),
        on_hand=message.on_hand,
        reserved=message.reserved,
        available=message.on_hand - message.reserved,
        updated_at=event.occurred_at,
        last_sequence=event.sequence or 0,
    )


def timeline_entry(event: Envelope) -> TimelineRow | None:
    if event.saga_id is None:
        return None
    return TimelineRow(
        saga_id=event.saga_id,
        entity_key=event.key,
        sequence=event.sequence or 0,
        event_type=event.type,
        occurred_at=event.occurred_at,
        summary=summarize(event.message()),
    )


def summarize(message: Message) -> str:
    """A line a person reads in a saga's timeline."""
    match message:
        case orders.OrderPlaced():
            lines = len(message.lines)
            return f"order placed by {message.customer_id}: {lines} line(s), total {message.total}"
        case orders.OrderStatusChanged(reason=None):
            return f"status {message.status}"
        case orders.OrderStatusChanged():
            return f"status {message.status}: {message.reason}"
        case orders.CancelRefused():
            return f"cancel refused: {message.reason}"
        case ledger.Reserved():
            return f"reserved {message.quantity} until {message.expires_at}"
        case ledger.ReservationRejected():
            return f"reservation rejected: {message.reason}"
        case ledger.Confirmed():
            return f"sold {message.quantity}"
        case ledger.ConfirmRefused():
            return f"confirm refused: {message.reason}"
        case ledger.Released():
            return f"released {message.quantity} ({message.reason})"
        case payment.Authorized():
            return f"payment of {message.amount} authorized ({message.method})"
        case payment.Declined():
            return f"payment declined: {message.reason}"
        case payment.Captured():
            return f"payment of {message.amount} captured"
        case payment.Voided(refunded=True):
            return f"payment of {message.amount} refunded"
        case payment.Voided():
            return f"payment of {message.amount} voided"
    return message.TYPE
