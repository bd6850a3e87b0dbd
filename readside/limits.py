"""Does an event fit the read-model columns? Checked before a batch is written.

A value the database would refuse (an id longer than its column, a total beyond
NUMERIC(14,2), a count beyond INTEGER, a NUL character or a lone surrogate in any text, a
time that leaves the calendar when turned into UTC) would fail the whole batch's
transaction on every retry and stall the projector. Such an event is dead-lettered
instead, and its entity's later events wait behind the gap it leaves, visibly (see
/projections/status). SQLite ignores most of these limits, PostgreSQL does not; checking
them here makes both backends behave the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Column, Numeric, String

from readside import codec, schema
from sagas.contracts.ledger import LedgerFact
from sagas.contracts.orders import OrderPlaced
from sagas.ids import is_external_command_id
from sagas.messages import Envelope, Message
from sagas.projections.rows import ORDER, PRODUCT, entity_id
from sagas.untrusted import encodable

MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class _Length:
    """The length of a VARCHAR column, read once from the schema (this runs per event)."""

    where: str
    length: int

    @classmethod
    def of(cls, column: Column[str]) -> _Length:
        assert isinstance(column.type, String) and column.type.length is not None
        return cls(f"{column.table.name}.{column.name}", column.type.length)

    def problem(self, value: str | None) -> str | None:
        if value is None or len(value) <= self.length:
            return None
        return f"{self.where} holds {self.length} characters, got {len(value)}"


ENTITY_KEY = _Length.of(schema.entity_positions.c.entity_key)
EVENT_TYPE = _Length.of(schema.saga_timeline.c.event_type)
SAGA_ID = _Length.of(schema.saga_timeline.c.saga_id)
COMMAND_ID = _Length.of(schema.command_receipts.c.command_id)
ORDER_ID = _Length.of(schema.orders.c.order_id)
PRODUCT_ID = _Length.of(schema.product_stock.c.product_id)
CUSTOMER_ID = _Length.of(schema.orders.c.customer_id)
PAYMENT_METHOD = _Length.of(schema.orders.c.payment_method)
_TOTAL = schema.orders.c.total.type
assert isinstance(_TOTAL, Numeric) and _TOTAL.precision is not None
TOTAL_BELOW = Decimal(10) ** (_TOTAL.precision - (_TOTAL.scale or 0))


def unstorable_reason(event: Envelope, message: Message | None) -> str | None:
    """Why ``event`` cannot be stored, or None when it fits. ``message`` is its payload
    (None when the projector does not know the type)."""
    return (
        _lengths_problem(event, message)
        or _numbers_problem(event, message)
        or _time_problem(event)
        or _text_problem(event)
    )


def _lengths_problem(event: Envelope, message: Message | None) -> str | None:
    checks = [(ENTITY_KEY, event.key), (EVENT_TYPE, event.type), (SAGA_ID, event.saga_id)]
    if is_external_command_id(event.causation_id):
        checks.append((COMMAND_ID, event.causation_id))
    if event.entity_type == ORDER:
        checks.append((ORDER_ID, entity_id(event)))
    elif event.entity_type == PRODUCT:
        checks.append((PRODUCT_ID, entity_id(event)))
    if isinstance(message, OrderPlaced):
        checks += [(CUSTOMER_ID, message.customer_id), (PAYMENT_METHOD, message.payment_method)]
    for limit, value in checks:
        if (problem := limit.problem(value)) is not None:
            return problem
    return None


def _numbers_problem(event: Envelope, message: Message | None) -> str | None:
    if not 1 <= (event.sequence or 0) <= MAX_INT:
        return f"sequence {event.sequence} is outside 1..{MAX_INT}"
    if isinstance(message, OrderPlaced):
        total = message.total
        if not total.is_finite() or abs(codec.money(total)) >= TOTAL_BELOW:
            return f"orders.total holds less than {TOTAL_BELOW}, got {total}"
    if isinstance(message, LedgerFact):
        counts = {
            "on_hand": message.on_hand,
            "reserved": message.reserved,
            "available": message.on_hand - message.reserved,
        }
        for name, value in counts.items():
            if not -MAX_INT - 1 <= value <= MAX_INT:
                return f"product_stock.{name} is an INTEGER, got {value}"
    return None


def _time_problem(event: Envelope) -> str | None:
    try:
        codec.utc(event.occurred_at)
    except OverflowError:
        return f"occurred_at {event.occurred_at.isoformat()} has no UTC equivalent"
    return None


def _text_problem(event: Envelope) -> str | None:
    """PostgreSQL text cannot hold NUL; no database can store a lone UTF-16 surrogate."""
    pending: list[object] = [
        event.message_id,
        event.key,
        event.type,
        event.saga_id,
        event.causation_id,
        event.reply_to,
        event.entity_type,
        event.payload,
    ]
    while pending:  # a loop, not recursion: this runs for every event
        value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "a text contains a NUL character"
            if not value.isascii() and not encodable(value):
                return "a text is not valid Unicode (lone surrogate)"
        elif isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return None
