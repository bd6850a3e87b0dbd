"""Contracts of the legacy school database's change data capture (issue 10).

Three kinds. ``legacy.RowChanged`` (and ``legacy.TransactionEnded``) is one row change as
Debezium reported it, decoded from its envelope (:mod:`sagas.debezium`) and re-keyed by
its correlation key: the input of the correlator. The business events are what the
correlator emits, one per legacy action, whatever number of row changes the action took.
``ActionPart``, ``ClaimCourse`` and ``CourseClaimAnswered`` travel between the
correlator's two stages only. Ids and fields are the legacy
tables' (``deploy/local/legacy/school.sql``); texts are bounded so a hostile row cannot
make a record too large.
"""

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from sagas.messages import Message, Summary

LegacyId = Annotated[str, Field(min_length=1, max_length=100)]
"""A legacy primary key. Not the API's id pattern: the legacy database allows any text, and
the correlator must carry it; the enrollment domain checks its own pattern when it starts a
saga from one."""
LegacyText = Annotated[str, Field(max_length=1000)]
LegacyInt = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""A PostgreSQL ``int`` column."""

SCHEMA = "school"
"""The legacy schema whose tables the correlator follows."""
Table = Literal["student", "course", "student_course"]
"""The legacy tables the correlator follows (the type; :data:`ROW_MODELS`, the registry every
component iterates over: Debezium's topics, the decoder, the correlator)."""
Operation = Literal["c", "u", "d", "r"]
"""Debezium's ``op``: create, update, delete, read (a snapshot row)."""


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    KEY: ClassVar[tuple[str, ...]]
    """The primary key's columns: Debezium's record key, and a row change's position."""


class StudentRow(_Row):
    KEY = ("id",)

    id: LegacyId
    name: LegacyText | None = None
    email: LegacyText | None = None
    max_credits: LegacyInt | None = None


class CourseRow(_Row):
    KEY = ("id",)

    id: LegacyId
    title: LegacyText | None = None
    teacher: LegacyText | None = None
    capacity: LegacyInt | None = None
    credits: LegacyInt | None = None


class LinkRow(_Row):
    """A ``student_course`` row: the student enrolled in the course."""

    KEY = ("student_id", "course_id")

    student_id: LegacyId
    course_id: LegacyId


Row = StudentRow | CourseRow | LinkRow
ROW_MODELS: dict[str, type[Row]] = {
    "student": StudentRow,
    "course": CourseRow,
    "student_course": LinkRow,
}
assert tuple(ROW_MODELS) == get_args(Table), "one row model per followed table"


class RowChanged(Message):
    """One row change of a legacy table, as Debezium captured it (the correlator's input)."""

    TYPE = "legacy.RowChanged"
    table: Table
    op: Operation
    before: StudentRow | CourseRow | LinkRow | None
    after: StudentRow | CourseRow | LinkRow | None
    tx_id: int | None = Field(ge=0)
    """``source.txId``: the PostgreSQL transaction that made the change; shared by every row
    of one transaction (snapshot rows share the snapshot's)."""
    lsn: int = Field(ge=0)
    """``source.lsn``: the change's position in the write-ahead log."""
    ts_ms: int = Field(ge=0)
    """``source.ts_ms``: when the database made the change."""
    snapshot: bool
    """A row read by the connector's snapshot (``op: r``), not a change."""
    position: Annotated[str, Field(min_length=1, max_length=400)]
    """Identifies this change among all others (LSN, table, op, primary key): Debezium
    redelivers the same changes after a connector restart, and the correlator drops a
    position it has processed. The LSN alone is not enough: the delete and the create of a
    primary-key update share one, and so do all snapshot rows."""

    def row(self) -> StudentRow | CourseRow | LinkRow:
        """The row as it is after the change, or as it was before a delete."""
        found = self.after if self.after is not None else self.before
        assert found is not None, "decoding guarantees one of before/after"
        return found


# --- business events (to the domain-event topic) ------------------------------------------


class StudentEnrolled(Message):
    """A new ``student_course`` row: the student enrolled in the course, in one legacy
    action with, possibly, the creation of the student and the course."""

    TYPE = "legacy.StudentEnrolled"
    SUMMARY = Summary("legacy: {student_id} enrolled in {course_id}")
    student_id: LegacyId
    course_id: LegacyId
    student: StudentRow | None
    """The student row as the action left it, or else the latest one the correlator saw
    (None: none seen)."""
    course: CourseRow | None
    student_created: bool
    """The student row was created in the same action."""
    course_created: bool
    tx_ids: tuple[int, ...]
    """The source transactions the action spanned, ascending."""


class EnrollmentChanged(Message):
    """A ``student_course`` row moved to another course (its course id updated)."""

    TYPE = "legacy.EnrollmentChanged"
    SUMMARY = Summary("legacy: {student_id} moved from {from_course_id} to {course_id}")
    student_id: LegacyId
    from_course_id: LegacyId
    course_id: LegacyId
    course: CourseRow | None
    tx_ids: tuple[int, ...]


class EnrollmentDropped(Message):
    """A ``student_course`` row deleted."""

    TYPE = "legacy.EnrollmentDropped"
    SUMMARY = Summary("legacy: {student_id} dropped {course_id}")
    student_id: LegacyId
    course_id: LegacyId
    tx_ids: tuple[int, ...]


class StudentUpdated(Message):
    """A change to a ``student`` row alone (no enrollment in the same action)."""

    TYPE = "legacy.StudentUpdated"
    SUMMARY = Summary("legacy: student {student_id} changed {changed:count} field(s)")
    student_id: LegacyId
    student: StudentRow
    changed: tuple[str, ...]
    """The columns whose values differ (all of them for a row created alone)."""
    created: bool
    tx_ids: tuple[int, ...]


class CourseUpdated(Message):
    """A change to a ``course`` row alone (no enrollment in the same action)."""

    TYPE = "legacy.CourseUpdated"
    SUMMARY = Summary("legacy: course {course_id} changed {changed:count} field(s)")
    course_id: LegacyId
    course: CourseRow
    changed: tuple[str, ...]
    created: bool
    tx_ids: tuple[int, ...]


class TransactionEnded(Message):
    """The END record of a source transaction (Debezium's transaction metadata topic): how
    many change events it produced, so the correlator can close it before its window ends."""

    TYPE = "legacy.TransactionEnded"
    tx_id: int = Field(ge=0)
    event_count: int = Field(ge=0, le=1_000_000)


# --- between the correlator's stages (sagas/definitions/legacy_actions.py) -----------------

BusinessEvent = (
    StudentEnrolled | EnrollmentChanged | EnrollmentDropped | StudentUpdated | CourseUpdated
)
"""What one action yields. The five have distinct required fields and forbid extra ones, so
a payload validates as exactly one of them (no discriminator needed)."""


class ActionPart(Message):
    """Stage 1 -> stage 2: one business event of one source transaction, not published yet.
    Stage 2 merges the parts of an action that spanned several transactions."""

    TYPE = "legacy.ActionPart"
    part_id: Annotated[str, Field(min_length=1, max_length=100)]
    """Derived from the positions of the transaction's rows and the event's place among
    them: a part stage 1 sends again (its rows redelivered) has the same id."""
    event: BusinessEvent
    lsn: int = Field(ge=0)
    """The highest LSN of the rows the event comes from: which of two row images is newer."""


class ClaimCourse(Message):
    """A student's new enrollment asks its course whether the course row was created within
    the window (then the enrollment carries it, and the course publishes nothing of it)."""

    TYPE = "legacy.ClaimCourse"
    claim_id: Annotated[str, Field(min_length=1, max_length=100)]
    student_id: LegacyId
    course_id: LegacyId


class CourseClaimAnswered(Message):
    """The course's answer to :class:`ClaimCourse`: ``created`` when the enrollment took the
    course's creation; ``course`` is the latest row the course knows either way."""

    TYPE = "legacy.CourseClaimAnswered"
    claim_id: Annotated[str, Field(min_length=1, max_length=100)]
    course: CourseRow | None
    created: bool
    tx_ids: tuple[int, ...]
    """The creation's source transactions (empty when not ``created``)."""


# --- the enrollment domain driven by legacy actions (SAGALINE_CDC_DRIVES_ENROLLMENT) --------


class MirrorEnrollment(Message):
    """Internal command of the ``legacy-domain`` process, from a student's instance to the
    instance of the enrollment it starts (keyed by that enrollment id): upsert the course
    and the student from these rows, then start the enrollment saga."""

    TYPE = "legacy.MirrorEnrollment"
    student_id: LegacyId
    course_id: LegacyId
    course: CourseRow | None
    student: StudentRow | None


class EnrollmentMirrored(Message):
    """A legacy enrollment started an enrollment saga (``enrollment_id``) in the domain."""

    TYPE = "legacy.EnrollmentMirrored"
    SUMMARY = Summary("legacy: {student_id} in {course_id} mirrored as {enrollment_id}")
    student_id: LegacyId
    course_id: LegacyId
    enrollment_id: LegacyId
    tx_ids: tuple[int, ...]


class NotMirrored(Message):
    """A legacy action the enrollment domain does not take, and why (an id the domain's
    pattern refuses, a drop of an enrollment it never mirrored)."""

    TYPE = "legacy.NotMirrored"
    SUMMARY = Summary("legacy: {action} of {student_id} in {course_id} not mirrored: {reason}")
    action: Literal["enroll", "drop"]
    student_id: LegacyId
    course_id: LegacyId
    reason: LegacyText
    tx_ids: tuple[int, ...]
