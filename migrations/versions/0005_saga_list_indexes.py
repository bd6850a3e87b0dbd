"""Indexes of the console's saga list and overview (issue 32): every saga newest change
first, or one status's, keyset-paged on (updated_at, id); the sagas that touched an entity.

Hand-written, adding indexes only (no table is created, altered or dropped: the Spark
rebuild's tables of 0002 and 0004 stay as they are), to match the declarations in
sagas/projections/orders.py and enrollments.py and readside/schema.py (the same metadata
the rebuild's staging tables take their indexes from, so a rebuild's swap keeps them); a
test compares the migrated database with that metadata on PostgreSQL and SQLite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES: tuple[tuple[str, str, list[str]], ...] = (
    ("ix_orders_updated", "orders", ["updated_at", "order_id"]),
    ("ix_orders_status_updated", "orders", ["status", "updated_at", "order_id"]),
    ("ix_enrollments_updated", "enrollments", ["updated_at", "enrollment_id"]),
    (
        "ix_enrollments_status_updated",
        "enrollments",
        ["status", "updated_at", "enrollment_id"],
    ),
    ("ix_saga_timeline_entity", "saga_timeline", ["entity_key", "saga_id"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
