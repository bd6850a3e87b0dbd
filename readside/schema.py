"""The read-model tables (SQLAlchemy Core). Alembic migrations create them; never create_all
outside tests.

A declared read model's table is built from its declaration (:mod:`sagas.catalog`); the
kernel's own tables (the saga timeline, entity positions, held events, checkpoints,
counters, command receipts) are written out here. ``tests/integration/test_migrations.py``
checks that the migrations create exactly these tables.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    MetaData,
    Numeric,
    String,
    Table,
)
from sqlalchemy import Integer as Integer_
from sqlalchemy import Text as Text_
from sqlalchemy.types import TypeEngine

from sagas.catalog import READ_MODELS
from sagas.projections.declare import Integer, JsonList, Kind, Money, ReadModel, Text, Timestamp

metadata = MetaData()


def _sql_type(kind: Kind) -> TypeEngine[Any]:
    match kind:
        case Text(length=None) | JsonList():
            return Text_()
        case Text(length=length):
            return String(length)
        case Integer():
            return Integer_()
        case Money(precision=precision, scale=scale):
            return Numeric(precision, scale)
        case Timestamp():
            return DateTime(timezone=True)
    raise TypeError(f"no SQL type for {kind!r}")


def _table(model: ReadModel[Any]) -> Table:
    columns = [
        Column(
            c.name,
            _sql_type(c.kind),
            primary_key=c.name == model.key,
            nullable=c.nullable,
            comment=c.comment,
        )
        for c in model.columns
    ]
    table = Table(model.name, metadata, *columns, comment=model.comment)
    for index in model.indexes:
        Index(
            index.name,
            *[table.c[n].desc() if n in index.descending else table.c[n] for n in index.columns],
        )
    return table


MODEL_TABLES: dict[str, Table] = {m.name: _table(m) for m in READ_MODELS}
"""One table per declared read model (:data:`sagas.catalog.READ_MODELS`), by model name."""


def table_of(model: ReadModel[Any]) -> Table:
    return MODEL_TABLES[model.name]


saga_timeline = Table(
    "saga_timeline",
    metadata,
    Column("saga_id", String(64), primary_key=True),
    Column("entity_key", String(200), primary_key=True),
    Column("sequence", Integer_, primary_key=True),
    Column("event_type", String(100), nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("summary", Text_, nullable=False),
)
# The sagas that touched an entity (the saga list's ``product=`` and ``entity=`` filters).
Index("ix_saga_timeline_entity", saga_timeline.c.entity_key, saga_timeline.c.saga_id)

entity_positions = Table(
    "entity_positions",
    metadata,
    Column("entity_key", String(200), primary_key=True),
    Column("last_sequence", Integer_, nullable=False),
    comment="Last applied sequence of every entity stream, whatever its read model",
)

pending_events = Table(
    "pending_events",
    metadata,
    Column("entity_key", String(200), primary_key=True),
    Column("sequence", Integer_, primary_key=True),
    Column("topic_partition", Integer_, nullable=False),
    Column("topic_offset", BigInteger, nullable=False),
    Column("envelope", Text_, nullable=False),
    Column("held_since", DateTime(timezone=True), comment="When the projector first held it"),
    comment="Events held behind a gap in their entity's sequence, until it fills",
)

projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("topic", String(200), primary_key=True),
    Column("partition", Integer_, primary_key=True),
    Column("next_offset", BigInteger, nullable=False, comment="The next offset to apply"),
)

projection_counters = Table(
    "projection_counters",
    metadata,
    Column("name", String(50), primary_key=True),
    Column("value", BigInteger, nullable=False),
    comment="Running totals of the projector (applied, duplicates, unknown types, dead letters)",
)

command_receipts = Table(
    "command_receipts",
    metadata,
    Column("command_id", String(200), primary_key=True),
    Column("entity_key", String(200), nullable=False),
    Column("topic_partition", Integer_, nullable=False),
    Column("topic_offset", BigInteger, nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False),
    comment="API commands whose first event is applied: what consistency tokens wait for",
)
# Pruning deletes by age.
Index("ix_command_receipts_applied_at", command_receipts.c.applied_at)

READ_MODEL_TABLES = (*MODEL_TABLES.values(), saga_timeline, entity_positions, pending_events)
"""Everything a rebuild replaces, together with ``projection_checkpoints``."""
