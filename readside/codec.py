"""Read-model rows to SQL values and back, identical on PostgreSQL and SQLite.

SQLite keeps no time zone and stores NUMERIC as a float, so every time is written in UTC
and read back as UTC, and money is rounded to cents before it is written. A row read from
either backend then compares equal to the row the fold produced. A declared model's row is
converted column by column, by the kind its declaration gives each column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel

from sagas.projections.declare import JsonList, Kind, Money, ReadModel, Timestamp
from sagas.projections.rows import TimelineRow

CENT = Decimal("0.01")


def utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive value (SQLite gives those back) is taken as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def money(value: Decimal | float | int | str, scale: int = 2) -> Decimal:
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


def _to_sql(kind: Kind, value: Any) -> Any:
    if value is None:
        return None
    match kind:
        case Money(scale=scale):
            return money(value, scale)
        case Timestamp():
            return utc(value)
        case JsonList():
            items = [i.model_dump(mode="json") if isinstance(i, BaseModel) else i for i in value]
            return json.dumps(items, separators=(",", ":"))
    return value


def _from_sql(kind: Kind, value: Any) -> Any:
    if value is None:
        return None
    match kind:
        case Money(scale=scale):
            return money(value, scale)
        case Timestamp():
            return utc(value)
        case JsonList():
            return json.loads(value)  # the row model validates the items
    return value


def row_values(model: ReadModel[Any], row: BaseModel) -> dict[str, Any]:
    return {c.name: _to_sql(c.kind, getattr(row, c.name)) for c in model.columns}


def row_of(model: ReadModel[Any], values: Mapping[Any, Any]) -> Any:
    return model.row_type.model_validate(
        {c.name: _from_sql(c.kind, values[c.name]) for c in model.columns}
    )


def timeline_values(row: TimelineRow) -> dict[str, Any]:
    return row.model_dump() | {"occurred_at": utc(row.occurred_at)}


def timeline_row(values: Mapping[Any, Any]) -> TimelineRow:
    return TimelineRow.model_validate(dict(values) | {"occurred_at": utc(values["occurred_at"])})
