"""Rebuilds that failed: when, at which stage, and why (rebuild_runs holds the swapped ones).

Hand-written to match spark_projections/tables.py; the same test as for 0002 compares the
migrated database with that metadata on PostgreSQL and SQLite.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "rebuild_failures",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("topic", sa.String(200), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("failed_at", TZ, nullable=False),
        sa.Column("stage", sa.String(40), nullable=False, comment="Where it stopped: offsets, ..."),
        sa.Column("error", sa.Text(), nullable=False, comment="The error's type and message"),
        comment="Every rebuild that ended without swapping its models in, and why",
    )


def downgrade() -> None:
    op.drop_table("rebuild_failures")
