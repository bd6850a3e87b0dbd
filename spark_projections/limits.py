"""Native mirror of :func:`readside.limits.unstorable_reason`: does an event fit
the read-model columns? The kernel's columns come from :mod:`readside.schema`; which event
values land in which column of a declared read model, and what that column holds, from the
model's declaration, read the way :func:`readside.limits.column_values` reads it.

Only the fast route uses this (see :mod:`spark_projections.parse`); a record that fails it
takes the exact route, where the projector's own function decides and words the reason.
So the checks here may be stricter than Python's, never looser: a value they cannot judge
fails them. The golden-record tests hold one record per limit and compare both routes.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType
from sqlalchemy import String

from readside import schema
from readside.limits import MAX_INT
from sagas.catalog import READ_MODELS
from sagas.ids import COMMAND_ID_PREFIX
from sagas.messages import Message
from sagas.projections.declare import (
    Difference,
    EntityId,
    Integer,
    Kind,
    Latest,
    LatestVersion,
    Money,
    OrElse,
    ReadModel,
    Text,
    Value,
    subtypes,
)
from spark_projections import contract


def fits() -> Column:
    """Over the parsed envelope columns (``e_*``) and payload ``p``."""

    def env(name: str) -> Column:
        return F.col(f"e_{name}")

    external = F.coalesce(env("causation_id").startswith(COMMAND_ID_PREFIX), F.lit(False))
    checks = [
        _short(env("key"), schema.entity_positions.c.entity_key),
        _short(env("type"), schema.saga_timeline.c.event_type),
        env("saga_id").isNull() | _short(env("saga_id"), schema.saga_timeline.c.saga_id),
        ~external | _short(env("causation_id"), schema.command_receipts.c.command_id),
        env("sequence").between(1, MAX_INT),
    ]
    for model in READ_MODELS:
        of_model = env("entity_type") == F.lit(model.entity_type)
        checks += [~of_model | check for check in _model_checks(model)]
    result = F.lit(True)
    for check in checks:
        result = result & check
    return result


def entity_id(key: Column) -> Column:
    """What follows the first colon of an entity key (``rows.entity_id``)."""
    return key.substr(F.instr(key, ":") + 1, F.lit(1 << 30))


def _model_checks(model: ReadModel[Any]) -> Iterator[Column]:
    """One check per value an event of ``model``'s entity type puts into a column: true
    where the event does not put it there (another type), where it is null, or where it
    fits the column's kind."""
    for column in model.columns:
        for applies, value in _event_values(column.value):
            if (fit := _fits_kind(column.kind, value)) is not None:
                yield ~applies | value.isNull() | F.coalesce(fit, F.lit(False))


def _event_values(value: Value) -> Iterator[tuple[Column, Column]]:
    """(the event's type puts it there, the value), as :func:`readside.limits.column_values`
    reads the declaration; only types with a native contract (the others never take the
    fast route, and their fields may not be parsed at all)."""
    match value:
        case EntityId():
            yield F.lit(True), entity_id(F.col("e_key"))
        case LatestVersion():
            yield F.lit(True), F.col("e_definition_version")
        case Latest(of=of, field=name):
            for types, field in _typed(_native(of), name):
                yield F.col("e_type").isin(*types), field
        case Difference(left=Latest(of=a, field=x), right=Latest(of=b, field=y)):
            both = sorted(set(_native(a)) & set(_native(b)))
            for types, left in _typed(both, x):
                for kinds, right in _typed(types, y):
                    # Longs: as decimal(38,0) their difference cannot overflow (a long's
                    # own subtraction can: an error under ANSI mode).
                    exact = "decimal(38,0)"
                    difference = left.try_cast(exact) - right.try_cast(exact)
                    yield F.col("e_type").isin(*kinds), difference
        case OrElse(first=first, then=then):
            yield from _event_values(first)
            yield from _event_values(then)


def _typed(types: list[str], name: str) -> Iterator[tuple[list[str], Column]]:
    """Field ``name`` of the payload, read as each of ``types`` types it (grouped by type)."""
    by_dtype: dict[str, list[str]] = {}
    for type_name in types:
        by_dtype.setdefault(_dtype(type_name, name).json(), []).append(type_name)
    for group in by_dtype.values():
        yield group, contract.read(F.col("p"), name, _dtype(group[0], name))


def _dtype(type_name: str, name: str) -> DataType:
    spec = contract.native_contracts()[type_name]
    return next(f.dtype for f in spec.fields if f.name == name)


def _native(of: type[Message]) -> list[str]:
    natives = contract.native_contracts()
    return sorted(t for t in subtypes(of) if t in natives)


def _fits_kind(kind: Kind, value: Column) -> Column | None:
    match kind:
        case Text(length=length) if length is not None:
            return F.length(value) <= length
        case Money(precision=precision, scale=scale):
            return _money_fits(value, precision, scale)
        case Integer():
            return value.between(-MAX_INT - 1, MAX_INT)
    return None


def _short(value: Column, column: object) -> Column:
    kind = column.type  # type: ignore[attr-defined]
    assert isinstance(kind, String) and kind.length is not None
    return F.length(value) <= kind.length


def _money_fits(value: Column, precision: int, scale: int) -> Column:
    """``abs(money(value)) < 10 ** (precision - scale)``; ``value`` is a canonical decimal."""
    limit = Decimal(10) ** (precision - scale)
    # Casting rounds half up, exactly like codec.money (quantize ROUND_HALF_UP). A value the
    # cast cannot take (too long, not a number: this check may see a value the contract
    # checks refuse, ANSI mode or not) is null, and fails.
    return F.abs(value.try_cast(f"decimal(38,{scale})")) < F.lit(limit)
