"""A declared read model's rows, natively: its declaration's column values
(:data:`sagas.projections.declare.Value`) interpreted as Spark aggregates.

Over an entity's applied events of known types (the projector folds by the key's prefix,
so the entity type is that prefix): the row starts at the latest event of the model's
``starts`` type (none: no row); a ``Latest``/``LatestTime``/``LatestSequence`` column is
read from the latest event of its type (``LatestVersion``: of any type) over the whole
stream, and counts only when that event is at or after the start (otherwise there is none
since the start). One aggregate
per event type a column reads, one group-by per model; no window, no sort.

Output columns are named, ordered and typed like the model's SQL table
(:mod:`readside.schema`): ``Text`` as string, ``Integer`` as int, ``Money(p, s)`` as
``decimal(p,s)``, ``Timestamp`` as timestamp, ``JsonList`` as the JSON text the projector's
codec writes (:mod:`spark_projections.json_text`: nulls kept, every character outside
printable ASCII escaped as Python's ``json.dumps`` escapes it). A column the
declaration reads from a field Spark does not parse (no such field, or a type without a
native contract) raises :class:`NoNativeTwin` when the transform is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from sagas.machinery.versions import FIRST
from sagas.messages import Message
from sagas.projections.declare import (
    Constant,
    Difference,
    EntityId,
    Integer,
    JsonList,
    Kind,
    Latest,
    LatestSequence,
    LatestTime,
    LatestVersion,
    Money,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
    Value,
    subtypes,
)
from spark_projections import contract, gate, json_text, limits

_START = "_start"


class NoNativeTwin(ValueError):
    """A column's declared value cannot be computed from the events Spark parses."""


@dataclass(frozen=True)
class _Source:
    """The latest event of one type (``of``; None: any known type) and the payload fields
    the model reads from it, as one aggregate column."""

    of: type[Message] | None
    alias: str
    fields: tuple[tuple[str, DataType], ...]
    """(name, the Spark type every subtype's native contract gives it)"""

    def is_of(self) -> Column:
        if self.of is None:
            return F.lit(True)
        return F.col("type").isin(*sorted(subtypes(self.of)))

    def aggregate(self) -> Column:
        matches = self.is_of()
        payload = [contract.read(F.col("p"), f, dtype).alias(f) for f, dtype in self.fields]
        latest = F.struct(
            F.col("sequence"), F.col("occurred_at"), F.col("definition_version"), *payload
        )
        return F.max_by(F.when(matches, latest), F.when(matches, F.col("sequence"))).alias(
            self.alias
        )

    def since_start(self) -> Column:
        """The latest event, or null when it came before the row's start."""
        latest = F.col(self.alias)
        return F.when(latest["sequence"] >= F.col(_START), latest).alias(self.alias)


def rows(gated: DataFrame, model: ReadModel[Any]) -> DataFrame:
    """``model``'s rows as the online projector holds them, from the gated events."""
    sources = _sources(model)
    events = known_applied(gated, model.entity_type)
    starts = F.col("type").isin(*sorted(subtypes(model.starts)))
    latest = events.groupBy("entity_key").agg(
        F.max(F.when(starts, F.col("sequence"))).alias(_START),
        *[s.aggregate() for s in sources.values()],
    )
    since = latest.where(F.col(_START).isNotNull()).select(
        "entity_key", _START, *[s.since_start() for s in sources.values()]
    )
    return since.select(
        *[_typed(c.kind, _value(c.value, sources)).alias(c.name) for c in model.columns]
    )


def known_applied(gated: DataFrame, entity_type: str) -> DataFrame:
    """Applied events of known types of the entities of ``entity_type``."""
    # The projector picks the fold by the key's prefix (batch._entity), so do we.
    kind = F.substring_index(F.col("entity_key"), ":", 1)
    return gate.applied(gated).where(F.col("known") & (kind == F.lit(entity_type)))


def _sources(model: ReadModel[Any]) -> dict[type[Message] | None, _Source]:
    """One source per event type the columns read, with the fields read from it."""
    fields: dict[type[Message] | None, list[tuple[str, DataType]]] = {}
    for column in model.columns:
        for value in _leaves(column.value):
            match value:
                case Latest(of=of, field=name):
                    dtype = _check_field(model, column.name, of, name)
                    wanted = fields.setdefault(of, [])
                    if (name, dtype) not in wanted:
                        wanted.append((name, dtype))
                case LatestTime(of=of) | LatestSequence(of=of):
                    fields.setdefault(of, [])
                case LatestVersion():
                    fields.setdefault(None, [])
    return {of: _Source(of, f"_latest{i}", tuple(f)) for i, (of, f) in enumerate(fields.items())}


def _leaves(value: Value) -> list[Value]:
    match value:
        case Difference(left=left, right=right):
            return [left, right]
        case OrElse(first=first, then=then):
            return [*_leaves(first), *_leaves(then)]
    return [value]


def _check_field(model: ReadModel[Any], column: str, of: type[Message], name: str) -> DataType:
    """The Spark type of field ``name`` of ``of`` and every subtype of it."""
    where = f"read model {model.name}, column {column}"
    if name not in of.model_fields:
        raise NoNativeTwin(f"{where}: {of.__name__} has no field {name!r}")
    natives = contract.native_contracts()
    for type_name in sorted(subtypes(of)):
        if type_name not in natives:
            raise NoNativeTwin(
                f"{where}: {type_name} has no native contract (a field "
                "spark_projections.contract cannot vouch for)"
            )
    dtype = contract.field_type(sorted(subtypes(of)), name)
    if dtype is None:
        raise NoNativeTwin(f"{where}: the subtypes of {of.__name__} type {name!r} differently")
    return dtype


def _value(value: Value, sources: dict[type[Message] | None, _Source]) -> Column:
    match value:
        case EntityId():
            return limits.entity_id(F.col("entity_key"))
        case Latest(of=of, field=name):
            return F.col(sources[of].alias)[name]
        case LatestTime(of=of):
            return F.col(sources[of].alias)["occurred_at"]
        case LatestSequence(of=of):
            return F.col(sources[of].alias)["sequence"]
        case LatestVersion():
            return F.coalesce(F.col(sources[None].alias)["definition_version"], F.lit(FIRST))
        case Difference(left=left, right=right):
            # Null rather than an error (ANSI mode) where two longs' difference overflows.
            return F.try_subtract(_value(left, sources), _value(right, sources))
        case OrElse(first=first, then=then):
            return F.coalesce(_value(first, sources), _value(then, sources))
        case Constant(value=constant):
            return F.lit(constant)
    raise NoNativeTwin(f"no native twin for {value!r}")


def _typed(kind: Kind, value: Column) -> Column:
    """``value`` as the SQL table's column holds it. Every applied event's values fit their
    columns (the projector dead-letters those that do not, and so does the rebuild: the
    limits), so these casts never meet a value they cannot take; were one to, it would be
    null (``try_cast``), never an error that fails the whole rebuild under ANSI mode."""
    match kind:
        case JsonList():
            return json_text.python_json(F.to_json(value, {"ignoreNullFields": "false"}))
        case Money(precision=precision, scale=scale):
            return value.try_cast(f"decimal({precision},{scale})")
        case Integer():
            return value.try_cast("int")
        case Timestamp():
            return value.try_cast("timestamp")
        case Text():
            return value.cast("string")  # any value has a text
    raise NoNativeTwin(f"no Spark type for {kind!r}")
