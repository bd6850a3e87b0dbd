"""The ``product_stock`` read model: a product's units on hand, reserved and available."""

from __future__ import annotations

from datetime import datetime

from sagas.contracts import ledger
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
from sagas.projections.rows import Row


class StockRow(Row):
    product_id: str
    on_hand: int
    reserved: int
    available: int
    updated_at: datetime
    last_sequence: int


_FACT = ledger.LedgerFact

PRODUCT_STOCK: ReadModel[StockRow] = ReadModel(
    name="product_stock",
    entity_type="product",
    row_type=StockRow,
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

apply_stock = PRODUCT_STOCK.fold
"""Derived from the columns (a product's row is its latest ledger fact: every one carries
the totals after it); components reach it as ``PRODUCT_STOCK.fold``."""
