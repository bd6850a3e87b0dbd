"""Read models, projector bookkeeping and command receipts.

Orders (and the customer history index), product stock, saga timeline, entity positions,
held events, checkpoints, counters and command receipts.

Hand-written to match readside/schema.py; a test compares the migrated database
with that metadata on PostgreSQL and SQLite.

Revision ID: 0001
Revises:
Create Date: 2024-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("order_id", sa.String(64), primary_key=True),
        sa.Column("customer_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("lines", sa.Text(), nullable=False, comment="JSON array of order lines"),
        sa.Column("total", sa.Numeric(14, 2), nullable=False),
        sa.Column("payment_method", sa.String(50), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
    )
    op.create_index(
        "ix_orders_customer_created", "orders", ["customer_id", sa.text("created_at DESC")]
    )
    op.create_table(
        "product_stock",
        sa.Column("product_id", sa.String(100), primary_key=True),
        sa.Column("on_hand", sa.Integer(), nullable=False),
        sa.Column("reserved", sa.Integer(), nullable=False),
        sa.Column("available", sa.Integer(), nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
    )
    op.create_table(
        "saga_timeline",
        sa.Column("saga_id", sa.String(64), primary_key=True),
        sa.Column("entity_key", sa.String(200), primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("event_type", sa.String(100), nullable=False),
        sa.Column("occurred_at", TZ, nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
    )
    op.create_table(
        "entity_positions",
        sa.Column("entity_key", sa.String(200), primary_key=True),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
        comment="Last applied sequence of every entity stream, whatever its read model",
    )
    op.create_table(
        "pending_events",
        sa.Column("entity_key", sa.String(200), primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("topic_partition", sa.Integer(), nullable=False),
        sa.Column("topic_offset", sa.BigInteger(), nullable=False),
        sa.Column("envelope", sa.Text(), nullable=False),
        sa.Column("held_since", TZ, comment="When the projector first held it"),
        comment="Events held behind a gap in their entity's sequence, until it fills",
    )
    op.create_table(
        "projection_checkpoints",
        sa.Column("topic", sa.String(200), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column(
            "next_offset", sa.BigInteger(), nullable=False, comment="The next offset to apply"
        ),
    )
    op.create_table(
        "projection_counters",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
        comment="Running totals of the projector (applied, duplicates, unknown types, "
        "dead letters)",
    )
    op.create_table(
        "command_receipts",
        sa.Column("command_id", sa.String(200), primary_key=True),
        sa.Column("entity_key", sa.String(200), nullable=False),
        sa.Column("topic_partition", sa.Integer(), nullable=False),
        sa.Column("topic_offset", sa.BigInteger(), nullable=False),
        sa.Column("applied_at", TZ, nullable=False),
        comment="API commands whose first event is applied: what consistency tokens wait for",
    )
    op.create_index("ix_command_receipts_applied_at", "command_receipts", ["applied_at"])


def downgrade() -> None:
    op.drop_index("ix_command_receipts_applied_at", table_name="command_receipts")
    op.drop_table("command_receipts")
    op.drop_table("projection_counters")
    op.drop_table("projection_checkpoints")
    op.drop_table("pending_events")
    op.drop_table("entity_positions")
    op.drop_table("saga_timeline")
    op.drop_table("product_stock")
    op.drop_index("ix_orders_customer_created", table_name="orders")
    op.drop_table("orders")
