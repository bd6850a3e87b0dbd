"""The read-model tables (SQLAlchemy Core). Alembic migrations create them; never create_all
outside tests. Column meanings come from :mod:`sagas.projections.rows`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
)

metadata = MetaData()

orders = Table(
    "orders",
    metadata,
    Column("order_id", String(64), primary_key=True),
    Column("customer_id", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("reason", Text),
    Column("lines", Text, nullable=False, comment="JSON array of order lines"),
    Column("total", Numeric(14, 2), nullable=False),
    Column("payment_method", String(50), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("last_sequence", Integer, nullable=False),
)
# The customer order history (a category projection across order streams) is served from
# this index: a customer's orders, newest first.
Index("ix_orders_customer_created", orders.c.customer_id, orders.c.created_at.desc())

product_stock = Table(
    "product_stock",
    metadata,
    Column("product_id", String(100), primary_key=True),
    Column("on_hand", Integer, nullable=False),
    Column("reserved", Integer, nullable=False),
    Column("available", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("last_sequence", Integer, nullable=False),
)

saga_timeline = Table(
    "saga_timeline",
    metadata,
    Column("saga_id", String(64), primary_key=True),
    Column("entity_key", String(200), primary_key=True),
    Column("sequence", Integer, primary_key=True),
    Column("event_type", String(100), nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("summary", Text, nullable=False),
)

entity_positions = Table(
    "entity_positions",
    metadata,
    Column("entity_key", String(200), primary_key=True),
    Column("last_sequence", Integer, nullable=False),
    comment="Last applied sequence of every entity stream, whatever its read model",
)

pending_events = Table(
    "pending_events",
    metadata,
    Column("entity_key", String(200), primary_key=True),
    Column("sequence", Integer, primary_key=True),
    Column("topic_partition", Integer, nullable=False),
    Column("topic_offset", BigInteger, nullable=False),
    Column("envelope", Text, nullable=False),
    Column("held_since", DateTime(timezone=True), comment="When the projector first held it"),
    comment="Events held behind a gap in their entity's sequence, until it fills",
)

projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("topic", String(200), primary_key=True),
    Column("partition", Integer, primary_key=True),
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
    Column("topic_partition", Integer, nullable=False),
    Column("topic_offset", BigInteger, nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False),
    comment="API commands whose first event is applied: what consistency tokens wait for",
)
# Pruning deletes by age.
Index("ix_command_receipts_applied_at", command_receipts.c.applied_at)

READ_MODEL_TABLES = (orders, product_stock, saga_timeline, entity_positions, pending_events)
"""Everything a rebuild replaces, together with ``projection_checkpoints``."""
