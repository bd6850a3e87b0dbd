"""The ``course_roster`` read model: a course, who is enrolled, how many seats are held and
its waitlist in position order. Every course fact carries the roster after it."""

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


class RosterRow(Row):
    course_id: str
    title: str
    capacity: int
    credits: int
    enrolled: tuple[str, ...]
    held: int
    waitlist: tuple[e.WaitlistEntry, ...]
    updated_at: datetime
    last_sequence: int


_FACT = e.CourseFact

COURSE_ROSTER: ReadModel[RosterRow] = ReadModel(
    name="course_roster",
    entity_type="course",
    row_type=RosterRow,
    key="course_id",
    starts=_FACT,
    columns=(
        Column("course_id", Text(100), EntityId()),
        Column("title", Text(200), Latest(_FACT, "title")),
        Column("capacity", Integer(), Latest(_FACT, "capacity")),
        Column("credits", Integer(), Latest(_FACT, "credits")),
        Column(
            "enrolled",
            JsonList(),
            Latest(_FACT, "enrolled"),
            comment="JSON array of the enrolled student ids, in the order confirmed",
        ),
        Column("held", Integer(), Latest(_FACT, "held")),
        Column(
            "waitlist",
            JsonList(),
            Latest(_FACT, "waitlist"),
            comment="JSON array of {enrollment_id, student_id, position}, in position order",
        ),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("last_sequence", Integer(), LatestSequence(_FACT)),
    ),
)

apply_roster = COURSE_ROSTER.fold
"""Derived from the columns; components reach it as ``COURSE_ROSTER.fold``."""
