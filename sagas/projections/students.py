"""The ``student_enrollments`` read model: a student, their credits and the enrollments
holding or using them. Every student fact carries the student after it."""

from __future__ import annotations

from datetime import datetime

from sagas.contracts import enrollment as e
from sagas.projections.declare import (
    Column,
    EntityId,
    Integer,
    JsonList,
    Latest,
    LatestSequence,
    LatestTime,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row


class StudentRow(Row):
    student_id: str
    name: str
    max_credits: int
    credits_used: int
    credits_held: int
    enrollments: tuple[e.StudentEnrollment, ...]
    updated_at: datetime
    last_sequence: int


_FACT = e.StudentFact

STUDENT_ENROLLMENTS: ReadModel[StudentRow] = ReadModel(
    name="student_enrollments",
    entity_type="student",
    row_type=StudentRow,
    key="student_id",
    starts=_FACT,
    columns=(
        Column("student_id", Text(100), EntityId()),
        Column("name", Text(200), Latest(_FACT, "name")),
        Column("max_credits", Integer(), Latest(_FACT, "max_credits")),
        Column("credits_used", Integer(), Latest(_FACT, "credits_used")),
        Column("credits_held", Integer(), Latest(_FACT, "credits_held")),
        Column(
            "enrollments",
            JsonList(),
            Latest(_FACT, "enrollments"),
            comment="JSON array of {enrollment_id, course_id, credits, status: held|enrolled}",
        ),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("last_sequence", Integer(), LatestSequence(_FACT)),
    ),
)

apply_student = STUDENT_ENROLLMENTS.fold
"""Derived from the columns; components reach it as ``STUDENT_ENROLLMENTS.fold``."""
