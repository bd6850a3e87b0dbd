"""A read model's online fold, derived from its column declarations.

The columns' :data:`~sagas.projections.declare.Value` s are the model's one spec: the Spark
rebuild computes them in bulk (``spark_projections/twins.py``), and this module computes
them one event at a time, for the projector. An event of the model's ``starts`` type builds
the row from that event alone (every other source is empty since the start); any other
event rewrites only the columns whose value reads its type, and leaves the row as it is
(``None`` stays ``None``) when none does.

The row is all a projector keeps between events, so an update may only need operands it
can read back from the row: a value that is a column's whole value, a constant or the
entity id. :func:`derive` refuses a declaration whose update could need any other (a
``Difference`` whose changing side's partner is no column, an ``OrElse`` whose ``first``
is no column while its ``then`` can change...): declare that operand as a column of its
own.

A plan per concrete message type is worked out once, at its first event (an ``OrElse`` whose
``first`` that type never leaves null is just ``first`` there, a ``Difference`` with a side
it leaves empty is null), so the per-event work is a dictionary lookup and the changed
columns' reads.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from sagas.machinery.frozen import checked_copy
from sagas.machinery.versions import FIRST
from sagas.messages import Envelope, Message
from sagas.projections.declare import (
    Constant,
    Difference,
    EntityId,
    Latest,
    LatestSequence,
    LatestTime,
    LatestVersion,
    OrElse,
    ReadModel,
    Value,
)
from sagas.projections.rows import entity_id

R = TypeVar("R", bound=BaseModel)

Fold = Callable[[R | None, Envelope], R | None]
Plan = Callable[[R | None, Envelope, Message], R | None]
Compute = Callable[[Any, Envelope, Message], Any]
"""A value from (the row before the event, the event, its message)."""


class UnreadableOperand(ValueError):
    """A column's update would need a value the row does not hold."""


def derive(model: ReadModel[R]) -> Fold[R]:
    """``model``'s fold: ``(row or None, event) -> row or None``, in sequence order."""
    readable = {c.value: c.name for c in model.columns}
    for column in model.columns:
        _check(model, column.name, column.value, readable)
    plans: dict[type[Message], Plan[R]] = {}

    def fold(row: R | None, event: Envelope) -> R | None:
        message = event.message()
        plan = plans.get(type(message))
        if plan is None:
            plan = plans[type(message)] = _plan(model, type(message), readable)
        return plan(row, event, message)

    return fold


def _plan(model: ReadModel[R], kind: type[Message], readable: dict[Value, str]) -> Plan[R]:
    if issubclass(kind, model.starts):
        starting = _Terms([(c.name, _at_start(c.value, kind)) for c in model.columns])
        row_type = model.row_type

        def start(row: R | None, event: Envelope, message: Message) -> R | None:
            return row_type(**starting.values(row, event, message))

        return start
    changed = _Terms(
        [
            (c.name, term)
            for c in model.columns
            if (term := _update(c.value, kind, readable, f"{model.name}.{c.name}")) is not None
        ]
    )

    def update(row: R | None, event: Envelope, message: Message) -> R | None:
        if row is None or changed.empty:
            return row  # e.g. a cancel that overtook its order: no row to show it on
        return checked_copy(row, changed.values(row, event, message))

    return update


# --- one column: its value at a start, its change on any other event ---------------------

Term = tuple[str, Any]
"""How a value is had: ``("const", v)``; ``("field", name)`` of the message; ``("time",
None)``, the event's ``occurred_at``; ``("sequence", None)``; ``("version", None)``, the
version that published it; ``("id", None)``, the entity id; ``("row", column)``, before
the event; or ``("compute", f)`` (a ``Compute``) for what reduces to none of these. The
simple ones are read in a loop each, without a call: this is the projector's hot path."""

_NULL: Term = ("const", None)


class _Terms:
    """Columns and their terms, grouped by how they are read."""

    def __init__(self, terms: list[tuple[str, Term]]) -> None:
        self.empty = not terms
        self.consts = {name: arg for name, (how, arg) in terms if how == "const"}
        self.fields = [(name, arg) for name, (how, arg) in terms if how == "field"]
        self.times = [name for name, (how, _) in terms if how == "time"]
        self.sequences = [name for name, (how, _) in terms if how == "sequence"]
        self.versions = [name for name, (how, _) in terms if how == "version"]
        self.ids = [name for name, (how, _) in terms if how == "id"]
        self.rows = [(name, arg) for name, (how, arg) in terms if how == "row"]
        self.computes = [(name, arg) for name, (how, arg) in terms if how == "compute"]

    def values(self, row: Any, event: Envelope, message: Message) -> dict[str, Any]:
        values = dict(self.consts)
        for name, field in self.fields:
            values[name] = getattr(message, field)
        for name in self.times:
            values[name] = event.occurred_at
        for name in self.sequences:
            values[name] = event.sequence or 0
        for name in self.versions:
            values[name] = event.definition_version or FIRST
        for name in self.ids:
            values[name] = entity_id(event)
        for name, column in self.rows:
            values[name] = getattr(row, column)
        for name, compute in self.computes:
            values[name] = compute(row, event, message)
        return values


def _source(value: Value, kind: type[Message]) -> Term | None:
    """The term an event of ``kind`` gives a ``Latest*`` source it matches; else None."""
    match value:
        case Latest(of=of, field=name) if issubclass(kind, of):
            return ("field", name)
        case LatestTime(of=of) if issubclass(kind, of):
            return ("time", None)
        case LatestSequence(of=of) if of is None or issubclass(kind, of):
            return ("sequence", None)
        case LatestVersion():
            return ("version", None)
    return None


def _at_start(value: Value, kind: type[Message]) -> Term:
    """``value`` over the start event alone."""
    match value:
        case EntityId():
            return ("id", None)
        case Constant(value=constant):
            return ("const", constant)
        case Difference(left=left, right=right):
            return _minus(_at_start(left, kind), _at_start(right, kind))
        case OrElse(first=first, then=then):
            return _or_else(_at_start(first, kind), _at_start(then, kind), kind)
    found = _source(value, kind)
    return _NULL if found is None else found


def _update(
    value: Value, kind: type[Message], readable: dict[Value, str], where: str
) -> Term | None:
    """``value`` after a non-start event of ``kind``, or None when it cannot change."""
    match value:
        case EntityId() | Constant():
            return None
        case Difference(left=left, right=right):
            new_left = _update(left, kind, readable, where)
            new_right = _update(right, kind, readable, where)
            if new_left is None and new_right is None:
                return None
            return _minus(
                new_left or _reader(left, readable, where),
                new_right or _reader(right, readable, where),
            )
        case OrElse(first=first, then=then):
            new_first = _update(first, kind, readable, where)
            new_then = _update(then, kind, readable, where)
            if new_first is None and new_then is None:
                return None
            return _or_else(
                new_first or _reader(first, readable, where),
                new_then or _reader(then, readable, where),
                kind,
            )
    return _source(value, kind)


def _reader(value: Value, readable: dict[Value, str], where: str) -> Term:
    """``value`` as it stands before the event, read back from the row."""
    if (name := readable.get(value)) is not None:
        return ("row", name)
    match value:
        case EntityId() | Constant():
            return _at_start(value, Message)
        case Difference(left=left, right=right):
            return _minus(_reader(left, readable, where), _reader(right, readable, where))
        case OrElse(first=first, then=then):
            return _or_else(
                _reader(first, readable, where), _reader(then, readable, where), Message
            )

    def unreadable(row: Any, event: Envelope, message: Message) -> Any:
        # _check proved this is never called for the fields the contracts declare; a
        # subclass that makes a field nullable could still get here.
        raise UnreadableOperand(f"{where}: {value!r} is needed and the row does not hold it")

    return ("compute", unreadable)


def _minus(left: Term, right: Term) -> Term:
    if _NULL in (left, right):
        return _NULL
    a, b = _compute(left), _compute(right)

    def minus(row: Any, event: Envelope, message: Message) -> Any:
        x, y = a(row, event, message), b(row, event, message)
        return None if x is None or y is None else x - y

    return ("compute", minus)


def _or_else(first: Term, then: Term, kind: type[Message]) -> Term:
    """``first``, or ``then`` where it is null; ``first`` alone when it is never null."""
    if first == _NULL:
        return then
    how, arg = first
    if how in ("time", "sequence", "version", "id") or (how == "const" and arg is not None):
        return first
    if (
        how == "field"
        and arg in kind.model_fields
        and not _admits_none(kind.model_fields[arg].annotation)
    ):
        return first
    a, b = _compute(first), _compute(then)

    def or_else(row: Any, event: Envelope, message: Message) -> Any:
        found = a(row, event, message)
        return b(row, event, message) if found is None else found

    return ("compute", or_else)


def _compute(term: Term) -> Compute:
    how, arg = term
    match how:
        case "const":
            return lambda row, event, message: arg
        case "field":
            return lambda row, event, message: getattr(message, arg)
        case "time":
            return lambda row, event, message: event.occurred_at
        case "sequence":
            return lambda row, event, message: event.sequence or 0
        case "version":
            return lambda row, event, message: event.definition_version or FIRST
        case "id":
            return lambda row, event, message: entity_id(event)
        case "row":
            return lambda row, event, message: getattr(row, arg)
    compute: Compute = arg
    return compute


# --- the declaration-time check ----------------------------------------------------------


def _check(model: ReadModel[Any], column: str, value: Value, readable: dict[Value, str]) -> bool:
    """Whether ``value`` can change after the start; raises :class:`UnreadableOperand`
    when such a change could need an operand the row does not hold."""

    def refuse(needed: Value, why: str) -> UnreadableOperand:
        return UnreadableOperand(
            f"read model {model.name}, column {column}: {why}, and {needed!r} is no column: "
            "declare it as one (the row is all the projector keeps between events)"
        )

    match value:
        case EntityId() | Constant():
            return False
        case Latest(of=of) | LatestTime(of=of) | LatestSequence(of=of):
            return of is None or not issubclass(of, model.starts)
        case LatestVersion():
            return True
        case Difference(left=left, right=right):
            left_moves = _check(model, column, left, readable)
            right_moves = _check(model, column, right, readable)
            if left_moves and not _readable(right, readable):
                raise refuse(right, "its left side changes after the start")
            if right_moves and not _readable(left, readable):
                raise refuse(left, "its right side changes after the start")
            return left_moves or right_moves
        case OrElse(first=first, then=then):
            first_moves = _check(model, column, first, readable)
            then_moves = _check(model, column, then, readable)
            if then_moves and not _readable(first, readable):
                raise refuse(first, "its `then` changes after the start")
            if first_moves and _may_be_null(first) and not _readable(then, readable):
                raise refuse(then, "its `first` may change to null after the start")
            return first_moves or then_moves
    raise TypeError(f"read model {model.name}, column {column}: unknown value {value!r}")


def _readable(value: Value, readable: dict[Value, str]) -> bool:
    match value:
        case _ if value in readable:
            return True
        case EntityId() | Constant():
            return True
        case Difference(left=a, right=b) | OrElse(first=a, then=b):
            return _readable(a, readable) and _readable(b, readable)
    return False


def _may_be_null(value: Value) -> bool:
    match value:
        case Latest(of=of, field=name):
            return name not in of.model_fields or _admits_none(of.model_fields[name].annotation)
        case Difference(left=left, right=right):
            return _may_be_null(left) or _may_be_null(right)
        case OrElse(first=first, then=then):
            return _may_be_null(first) and _may_be_null(then)
    return False  # an id, a constant, a time, a sequence


def _admits_none(annotation: Any) -> bool:
    if annotation is None or annotation is Any or annotation is type(None):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_admits_none(a) for a in get_args(annotation))
    return False
