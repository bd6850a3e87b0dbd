"""The ``enrollments`` read model: one row per enrollment, its course and current status."""

from __future__ import annotations

from datetime import datetime

from sagas.contracts import enrollment as e
from sagas.machinery.versions import FIRST
from sagas.projections.declare import (
    SAGA_VERSION,
    Column,
    Constant,
    EntityId,
    Index,
    Integer,
    Latest,
    LatestSequence,
    LatestTime,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row


class EnrollmentRow(Row):
    enrollment_id: str
    student_id: str
    course_id: str
    status: str
    waitlist_position: int | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    last_sequence: int
    version: int = FIRST


_REQUESTED, _CHANGED = e.EnrollmentRequested, e.EnrollmentStatusChanged

ENROLLMENTS: ReadModel[EnrollmentRow] = ReadModel(
    name="enrollments",
    entity_type="enrollment",
    row_type=EnrollmentRow,
    key="enrollment_id",
    starts=_REQUESTED,
    columns=(
        Column("enrollment_id", Text(64), EntityId()),
        Column("student_id", Text(100), Latest(_REQUESTED, "student_id")),
        Column(
            "course_id",
            Text(100),
            OrElse(Latest(_CHANGED, "course_id"), Latest(_REQUESTED, "course_id")),
            comment="the enrollment's course now (the new one once a transfer is done)",
        ),
        Column("status", Text(20), OrElse(Latest(_CHANGED, "status"), Constant("PENDING"))),
        Column(
            "waitlist_position",
            Integer(),
            Latest(_CHANGED, "waitlist_position"),
            nullable=True,
            comment="1 for the head of the course's waitlist, while WAITLISTED",
        ),
        Column("reason", Text(), Latest(_CHANGED, "reason"), nullable=True),
        Column("created_at", Timestamp(), LatestTime(_REQUESTED)),
        Column("updated_at", Timestamp(), OrElse(LatestTime(_CHANGED), LatestTime(_REQUESTED))),
        Column("last_sequence", Integer(), LatestSequence()),
        SAGA_VERSION,
    ),
    # A student's and a course's enrollments, newest first.
    indexes=(
        Index(
            "ix_enrollments_student_created",
            ("student_id", "created_at"),
            descending=frozenset({"created_at"}),
        ),
        Index("ix_enrollments_course_status", ("course_id", "status")),
        # The saga list and the overview, as for orders.
        Index("ix_enrollments_updated", ("updated_at", "enrollment_id")),
        Index("ix_enrollments_status_updated", ("status", "updated_at", "enrollment_id")),
        # The list filtered by version (one range per status) and the counts per version.
        Index(
            "ix_enrollments_status_version", ("status", "version", "updated_at", "enrollment_id")
        ),
    ),
)

apply_enrollment = ENROLLMENTS.fold
"""Derived from the columns; components reach it as ``ENROLLMENTS.fold``."""
