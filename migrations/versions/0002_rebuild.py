"""Tables of the nightly Spark rebuild: rejected records, daily saga analytics, runs.

Hand-written to match spark_projections/tables.py; a test compares the migrated database
with that metadata on PostgreSQL and SQLite. The staging tables (``<table>__staging``) are
not here: each rebuild creates and drops its own.

Revision ID: 0002
Revises: 0001
Create Date: 2024-06-15
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "rebuild_rejects",
        sa.Column("topic", sa.String(200), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True),
        sa.Column("offset", sa.BigInteger(), primary_key=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "raw", sa.Text(), comment="The record's value as text (NULL for a record without one)"
        ),
        comment="Records of the event topic the last rebuild could not project, and why",
    )
    op.create_table(
        "saga_daily_stats",
        sa.Column("day", sa.Date(), primary_key=True, comment="UTC day the saga started"),
        sa.Column("saga_type", sa.String(100), primary_key=True),
        sa.Column("outcome", sa.String(20), primary_key=True, comment="Final status, or IN_FLIGHT"),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column(
            "p50_ms", sa.Float(), comment="Median start-to-final-state time (NULL for IN_FLIGHT)"
        ),
        sa.Column("p95_ms", sa.Float(), comment="95th percentile of that time"),
        comment="Sagas per start day, type and outcome, from the last rebuild",
    )
    op.create_table(
        "saga_daily_reasons",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("saga_type", sa.String(100), primary_key=True),
        sa.Column("outcome", sa.String(20), primary_key=True),
        sa.Column("reason", sa.String(500), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        comment="Why sagas failed, per start day, type and outcome, from the last rebuild",
    )
    op.create_table(
        "rebuild_runs",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("topic", sa.String(200), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("swapped_at", TZ, nullable=False),
        sa.Column("offsets", sa.Text(), nullable=False, comment="JSON: partition -> [start, end)"),
        sa.Column(
            "caught_up", sa.Text(), nullable=False, comment="JSON: partition -> [end, checkpoint)"
        ),
        sa.Column("events_read", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.Text(), nullable=False, comment="JSON: table -> rows swapped in"),
        comment="Every rebuild that swapped its models in: what it covered",
    )


def downgrade() -> None:
    op.drop_table("rebuild_runs")
    op.drop_table("saga_daily_reasons")
    op.drop_table("saga_daily_stats")
    op.drop_table("rebuild_rejects")
