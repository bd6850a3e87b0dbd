"""The ``product_stock`` read model: a product's units on hand, reserved and available."""

from __future__ import annotations

from datetime import datetime

from sagas.contracts import ledger
from sagas.messages import Envelope
from sagas.projections.declare import (
    Column,
    Difference,
    EntityId,
    Integer,
    Latest,
    LatestSequence,
    LatestTime,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row, entity_id


class StockRow(Row):
    product_id: str
    on_hand: int
    reserved: int
    available: int
    updated_at: datetime
    last_sequence: int


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


_FACT = ledger.LedgerFact  # every ledger fact carries the totals after it

PRODUCT_STOCK: ReadModel[StockRow] = ReadModel(
    name="product_stock",
    entity_type="product",
    row_type=StockRow,
    fold=apply_stock,
    key="product_id",
    starts=_FACT,
    columns=(
        Column("product_id", Text(100), EntityId()),
        Column("on_hand", Integer(), Latest(_FACT, "on_hand")),
        Column("reserved", Integer(), Latest(_FACT, "reserved")),
        Column(
            "available",
            Integer(),
            Difference(Latest(_FACT, "on_hand"), Latest(_FACT, "reserved")),
        ),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("last_sequence", Integer(), LatestSequence(_FACT)),
    ),
)
