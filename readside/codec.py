"""Read-model rows to SQL values and back, identical on PostgreSQL and SQLite.

SQLite keeps no time zone and stores NUMERIC as a float, so every time is written in UTC
and read back as UTC, and money is rounded to cents before it is written. A row read from
either backend then compares equal to the row the fold produced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from sagas.contracts.orders import OrderLine
from sagas.projections.rows import OrderRow, StockRow, TimelineRow

CENT = Decimal("0.01")


def utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive value (SQLite gives those back) is taken as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def money(value: Decimal | float | int | str) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def order_values(row: OrderRow) -> dict[str, Any]:
    lines = [line.model_dump(mode="json") for line in row.lines]
    return {
        "order_id": row.order_id,
        "customer_id": row.customer_id,
        "status": row.status,
        "reason": row.reason,
        "lines": json.dumps(lines, separators=(",", ":")),
        "total": money(row.total),
        "payment_method": row.payment_method,
        "created_at": utc(row.created_at),
        "updated_at": utc(row.updated_at),
        "last_sequence": row.last_sequence,
    }


def order_row(values: Mapping[Any, Any]) -> OrderRow:
    lines = tuple(OrderLine.model_validate(line) for line in json.loads(values["lines"]))
    return OrderRow(
        order_id=values["order_id"],
        customer_id=values["customer_id"],
        status=values["status"],
        reason=values["reason"],
        lines=lines,
        total=money(values["total"]),
        payment_method=values["payment_method"],
        created_at=utc(values["created_at"]),
        updated_at=utc(values["updated_at"]),
        last_sequence=values["last_sequence"],
    )


def stock_values(row: StockRow) -> dict[str, Any]:
    return row.model_dump() | {"updated_at": utc(row.updated_at)}


def stock_row(values: Mapping[Any, Any]) -> StockRow:
    return StockRow.model_validate(dict(values) | {"updated_at": utc(values["updated_at"])})


def timeline_values(row: TimelineRow) -> dict[str, Any]:
    return row.model_dump() | {"occurred_at": utc(row.occurred_at)}


def timeline_row(values: Mapping[Any, Any]) -> TimelineRow:
    return TimelineRow.model_validate(dict(values) | {"occurred_at": utc(values["occurred_at"])})
