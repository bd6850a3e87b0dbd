"""Read models of course enrollment: enrollments, course rosters, students' enrollments.

Hand-written to match the declarations in sagas/projections/ (enrollments.py, roster.py,
students.py), which readside/schema.py turns into metadata; a test compares the migrated
database with that metadata on PostgreSQL and SQLite.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "enrollments",
        sa.Column("enrollment_id", sa.String(64), primary_key=True),
        sa.Column("student_id", sa.String(100), nullable=False),
        sa.Column(
            "course_id",
            sa.String(100),
            nullable=False,
            comment="the enrollment's course now (the new one once a transfer is done)",
        ),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column(
            "waitlist_position",
            sa.Integer(),
            comment="1 for the head of the course's waitlist, while WAITLISTED",
        ),
        sa.Column("reason", sa.Text()),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
    )
    op.create_index(
        "ix_enrollments_student_created",
        "enrollments",
        ["student_id", sa.text("created_at DESC")],
    )
    op.create_index("ix_enrollments_course_status", "enrollments", ["course_id", "status"])
    op.create_table(
        "course_roster",
        sa.Column("course_id", sa.String(100), primary_key=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("credits", sa.Integer(), nullable=False),
        sa.Column(
            "enrolled",
            sa.Text(),
            nullable=False,
            comment="JSON array of the enrolled student ids, in the order confirmed",
        ),
        sa.Column("held", sa.Integer(), nullable=False),
        sa.Column(
            "waitlist",
            sa.Text(),
            nullable=False,
            comment="JSON array of {enrollment_id, student_id, position}, in position order",
        ),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
    )
    op.create_table(
        "student_enrollments",
        sa.Column("student_id", sa.String(100), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("max_credits", sa.Integer(), nullable=False),
        sa.Column("credits_used", sa.Integer(), nullable=False),
        sa.Column("credits_held", sa.Integer(), nullable=False),
        sa.Column(
            "enrollments",
            sa.Text(),
            nullable=False,
            comment="JSON array of {enrollment_id, course_id, credits, status: held|enrolled}",
        ),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("last_sequence", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("student_enrollments")
    op.drop_table("course_roster")
    op.drop_index("ix_enrollments_course_status", table_name="enrollments")
    op.drop_index("ix_enrollments_student_created", table_name="enrollments")
    op.drop_table("enrollments")
