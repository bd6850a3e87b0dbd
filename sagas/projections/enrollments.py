"""The ``enrollments`` read model: one row per enrollment, its course and current status."""

from __future__ import annotations

from datetime import datetime

from sagas.contracts import enrollment as e
from sagas.messages import Envelope
from sagas.projections.declare import (
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
from sagas.projections.rows import Row, entity_id


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


def apply_enrollment(row: EnrollmentRow | None, event: Envelope) -> EnrollmentRow | None:
    message = event.message()
    seq = event.sequence or 0
    if isinstance(message, e.EnrollmentRequested):
        return EnrollmentRow(
            enrollment_id=entity_id(event),
            student_id=message.student_id,
            course_id=message.course_id,
            status="PENDING",
            waitlist_position=None,
            reason=None,
            created_at=event.occurred_at,
            updated_at=event.occurred_at,
            last_sequence=seq,
        )
    if row is None:
        return None  # e.g. a drop that overtook its enrollment: nothing to show
    update: dict[str, object] = {"last_sequence": seq}
    if isinstance(message, e.EnrollmentStatusChanged):
        update |= {
            "status": message.status,
            "course_id": message.course_id,
            "waitlist_position": message.waitlist_position,
            "reason": message.reason,
            "updated_at": event.occurred_at,
        }
    return row.model_copy(update=update)


_REQUESTED, _CHANGED = e.EnrollmentRequested, e.EnrollmentStatusChanged

ENROLLMENTS: ReadModel[EnrollmentRow] = ReadModel(
    name="enrollments",
    entity_type="enrollment",
    row_type=EnrollmentRow,
    fold=apply_enrollment,
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
    ),
)
