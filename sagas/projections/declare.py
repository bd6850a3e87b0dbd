"""How a read model and a saga's statuses are declared: once, in the pure core.

A :class:`ReadModel` says everything the read side needs to know about one model: its name
(the SQL table), the entity type whose events it folds, its row type, the column holding
the entity id (its key), and each column's SQL shape. Each column also says,
declaratively, how its value follows from the entity's events (:data:`Value`): that is the
model's one spec, which the Spark rebuild computes in bulk (its *native twin*) and
:mod:`sagas.projections.fold` event by event (the model's ``fold``, which the online
projector runs); the Spark/online equality test compares the two interpreters.
The same column declarations give the column-fit checks (an event whose value would not
fit a column is dead-lettered, not written), the SQLAlchemy table and the row codec. No
component names a particular model: they all iterate over :mod:`sagas.catalog`.

A row exists once an event of a ``starts`` type has been applied; the latest such event
(re)starts it, and a column's value is computed over the events since then, in sequence
order. No database, no Spark, no clock here: only data that others interpret.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Envelope, Message

R = TypeVar("R", bound=BaseModel)

# --- SQL shapes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """VARCHAR(length), or TEXT when ``length`` is None."""

    length: int | None = None


@dataclass(frozen=True)
class Integer:
    """A 32-bit signed integer."""


@dataclass(frozen=True)
class Money:
    """NUMERIC(precision, scale), rounded half up to ``scale`` digits before it is written."""

    precision: int = 14
    scale: int = 2


@dataclass(frozen=True)
class Timestamp:
    """A time with time zone, always written and read back in UTC."""


@dataclass(frozen=True)
class JsonList:
    """A tuple (of models, strings or numbers), stored as a JSON array in TEXT."""


Kind = Text | Integer | Money | Timestamp | JsonList

# --- native twins: a column's value from the entity's events ---------------------------


@dataclass(frozen=True)
class EntityId:
    """The entity's id: what follows the first colon of its key (``order:o-1`` -> ``o-1``)."""


@dataclass(frozen=True)
class Latest:
    """Payload field ``field`` of the latest event (since the start) whose type is ``of``
    or a subclass of it; null when there is none."""

    of: type[Message]
    field: str


@dataclass(frozen=True)
class LatestTime:
    """``occurred_at`` of the latest event (since the start) of type ``of`` (or a subclass)."""

    of: type[Message]


@dataclass(frozen=True)
class LatestSequence:
    """The sequence of the latest event (since the start) of type ``of``; ``None``: of any
    type this projector knows."""

    of: type[Message] | None = None


@dataclass(frozen=True)
class LatestVersion:
    """The version of the definition whose instance published the latest event (since the
    start) of any type this projector knows: its envelope's ``version``, and version 1
    (:data:`~sagas.machinery.versions.FIRST`) for an event without one."""


@dataclass(frozen=True)
class Difference:
    left: Latest
    right: Latest


@dataclass(frozen=True)
class OrElse:
    """``first``, or ``then`` where ``first`` is null."""

    first: Value
    then: Value


@dataclass(frozen=True)
class Constant:
    value: str | int


Value = (
    EntityId | Latest | LatestTime | LatestSequence | LatestVersion | Difference | OrElse | Constant
)


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    value: Value
    """How the column follows from the entity's events (the native twin's part)."""
    nullable: bool = False
    comment: str | None = None


SAGA_VERSION = Column(
    "version",
    Integer(),
    LatestVersion(),
    comment="the version of the saga definition it runs on (1 for a saga from before versions)",
)
"""A saga model's version column (:attr:`SagaType.version_column`): declared by this one
name in each saga's model."""


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    descending: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReadModel(Generic[R]):
    name: str
    """The SQL table's name; also the model's name everywhere else."""
    entity_type: str
    """The entity whose events it folds (the part of the key before the first colon)."""
    row_type: type[R]
    key: str
    """The column holding the entity id: the table's primary key."""
    starts: type[Message]
    """A row exists once an event of this type (or a subclass) is applied."""
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    comment: str | None = None
    fold: Callable[[R | None, Envelope], R | None] = field(init=False, repr=False, compare=False)
    """``(row or None, event) -> row or None``, one event at a time, in sequence order:
    derived from the columns (:func:`sagas.projections.fold.derive`), never written."""

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"read model {self.name}: a column is declared twice")
        if names != list(self.row_type.model_fields):
            raise ValueError(
                f"read model {self.name}: columns {names} must be the fields of "
                f"{self.row_type.__name__} in order ({list(self.row_type.model_fields)})"
            )
        if self.key not in names:
            raise ValueError(f"read model {self.name}: key {self.key!r} is not a column")
        # fold.py interprets the values declared here, so it is imported once they are.
        from sagas.projections.fold import derive

        object.__setattr__(self, "fold", derive(self))

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def event_types(self) -> frozenset[type[Message]]:
        """The payload types whose content the model reads (the others only move its
        sequence, if a column says so)."""
        found: set[type[Message]] = {self.starts}
        pending: list[Value] = [c.value for c in self.columns]
        while pending:
            value = pending.pop()
            match value:
                case Latest(of=of) | LatestTime(of=of):
                    found.add(of)
                case LatestSequence(of=of) if of is not None:
                    found.add(of)
                case Difference(left=left, right=right):
                    pending += [left, right]
                case OrElse(first=first, then=then):
                    pending += [first, then]
        return frozenset(found)


def subtypes(base: type[Message]) -> frozenset[str]:
    """The registered type names of ``base`` and its subclasses."""
    return frozenset(t for t, m in Message.known_types().items() if issubclass(m, base))


# --- saga statuses ---------------------------------------------------------------------


@dataclass(frozen=True)
class SagaType:
    """A saga as the read side sees it: its instances are the entities of ``entity_type``
    (the saga id is the entity id), their statuses as declared, and the read model whose
    row shows an instance's current status."""

    entity_type: str
    statuses: SagaStatuses
    model: ReadModel[Any]
    status_column: str = "status"
    reason_column: str = "reason"
    updated_column: str = "updated_at"
    """When the row last changed: lists of sagas (the console's failures) are newest first."""
    version_column: str = "version"
    """The version of the definition the saga runs on (a :class:`LatestVersion` column)."""

    def key(self, saga_id: str) -> str:
        """The entity key of the saga's own stream (``order:o-1``)."""
        return f"{self.entity_type}:{saga_id}"

    def is_final(self, status: str | None) -> bool:
        return status in self.statuses.final

    def is_settled(self, status: str | None) -> bool:
        """No outcome is pending: what ``?wait=`` waits for (final, or resting between
        commands)."""
        return status in self.statuses.settled

    def __post_init__(self) -> None:
        if self.model.entity_type != self.entity_type:
            raise ValueError(f"saga {self.entity_type}: model {self.model.name} folds another")
        self.model.column(self.status_column)
        self.model.column(self.reason_column)
        self.model.column(self.updated_column)
        names = {c.name: c.value for c in self.model.columns}
        if names.get(self.version_column) != LatestVersion():
            raise ValueError(
                f"saga {self.entity_type}: its model {self.model.name} declares no column "
                f"{self.version_column!r} of value LatestVersion() (the version it runs on)"
            )
        start = self.statuses.start
        if start is not None and start is not self.model.starts:
            # The row that shows the first status is the one its start fact begins.
            raise ValueError(
                f"saga {self.entity_type}: starts with {start.TYPE}, "
                f"its model {self.model.name} with {self.model.starts.TYPE}"
            )
