"""Does an event fit the read-model columns? Checked before a batch is written.

A value the database would refuse (an id longer than its column, a total beyond
NUMERIC(14,2), a count beyond INTEGER, a NUL character or a lone surrogate in any text, a
time that leaves the calendar when turned into UTC) would fail the whole batch's
transaction on every retry and stall the projector. Such an event is dead-lettered
instead, and its entity's later events wait behind the gap it leaves, visibly (see
/projections/status). SQLite ignores most of these limits, PostgreSQL does not; checking
them here makes both backends behave the same. Which event values land in which columns of
a read model, and what those columns hold, comes from the model's declaration.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Column as SqlColumn
from sqlalchemy import String

from readside import codec, schema
from sagas.catalog import model_for
from sagas.ids import is_external_command_id
from sagas.machinery.versions import FIRST
from sagas.messages import Envelope, Message
from sagas.projections.declare import (
    Column,
    Difference,
    EntityId,
    Integer,
    Latest,
    LatestVersion,
    Money,
    OrElse,
    ReadModel,
    Text,
    Value,
)
from sagas.projections.rows import entity_id
from sagas.untrusted import encodable

MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class _Length:
    """The length of a VARCHAR column, read once from the schema (this runs per event)."""

    where: str
    length: int

    @classmethod
    def of(cls, column: SqlColumn[str]) -> _Length:
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


def unstorable_reason(event: Envelope, message: Message | None) -> str | None:
    """Why ``event`` cannot be stored, or None when it fits. ``message`` is its payload
    (None when the projector does not know the type)."""
    return (
        _lengths_problem(event, message)
        or _numbers_problem(event, message)
        or _time_problem(event)
        or _text_problem(event)
    )


def column_values(
    model: ReadModel[Any], event: Envelope, message: Message | None
) -> Iterator[tuple[Column, object]]:
    """The values ``event`` puts into the model's columns, as its declaration says (the
    columns a value comes from the event for; the others follow from these)."""
    for column in model.columns:
        for value in _event_values(column.value, event, message):
            yield column, value


def _event_values(value: Value, event: Envelope, message: Message | None) -> Iterator[object]:
    match value:
        case EntityId():
            yield entity_id(event)
        case LatestVersion():
            yield event.definition_version or FIRST
        case Latest(of=of, field=name) if isinstance(message, of):
            yield getattr(message, name)
        case Difference(left=Latest(of=a, field=x), right=Latest(of=b, field=y)) if isinstance(
            message, a
        ) and isinstance(message, b):
            yield getattr(message, x) - getattr(message, y)
        case OrElse(first=first, then=then):
            yield from _event_values(first, event, message)
            yield from _event_values(then, event, message)


def _model_values(event: Envelope, message: Message | None) -> list[tuple[Column, object]]:
    model = model_for(event.entity_type or "")
    return [] if model is None else list(column_values(model, event, message))


def _lengths_problem(event: Envelope, message: Message | None) -> str | None:
    checks = [(ENTITY_KEY, event.key), (EVENT_TYPE, event.type), (SAGA_ID, event.saga_id)]
    if is_external_command_id(event.causation_id):
        checks.append((COMMAND_ID, event.causation_id))
    model = model_for(event.entity_type or "")
    for column, value in _model_values(event, message):
        if isinstance(column.kind, Text) and column.kind.length is not None:
            assert model is not None
            where = _Length(f"{model.name}.{column.name}", column.kind.length)
            checks.append((where, value if isinstance(value, str) else None))
    for limit, text in checks:
        if (problem := limit.problem(text)) is not None:
            return problem
    return None


def _numbers_problem(event: Envelope, message: Message | None) -> str | None:
    if not 1 <= (event.sequence or 0) <= MAX_INT:
        return f"sequence {event.sequence} is outside 1..{MAX_INT}"
    model = model_for(event.entity_type or "")
    for column, value in _model_values(event, message):
        assert model is not None
        where = f"{model.name}.{column.name}"
        match column.kind:
            case Money(precision=precision, scale=scale) if isinstance(value, Decimal):
                below = Decimal(10) ** (precision - scale)
                # Past the column already, it is not rounded (quantizing a value of more
                # than 28 digits raises InvalidOperation: the reason would not say why).
                if (
                    not value.is_finite()
                    or abs(value) >= below
                    or abs(codec.money(value, scale)) >= below
                ):
                    return f"{where} holds less than {below}, got {value}"
            case Integer() if isinstance(value, int):
                if not -MAX_INT - 1 <= value <= MAX_INT:
                    return f"{where} is an INTEGER, got {value}"
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
