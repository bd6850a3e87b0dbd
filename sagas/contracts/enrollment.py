"""Course enrollment contracts: courses (seats and a waitlist), students (credits) and the
enrollment saga that moves between them.

Three entities, three prefixes: ``course.*`` goes to and comes from the course participant
(keyed by course id), ``student.*`` the student participant (keyed by student id),
``enrollment.*`` the enrollment saga (keyed by enrollment id). Every fact of a course or a
student carries what its read model shows after it, so a projection needs no history.

A *reservation id* names one seat request of one enrollment (and the credits it holds):
``<enrollment id>:t<n>``, n = 0 for the enrollment itself, 1, 2... for each transfer, so a
transfer back into a course never meets the tombstone of an earlier seat there.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from sagas.contracts.ledger import MAX_UNITS
from sagas.machinery.legs import Port
from sagas.messages import Message, Summary

ENTITY_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
"""What the API accepts as an id (``services/api/requests.ENTITY_ID``): plain characters, so
every key built from one is printable."""
MAX_ID = 100
"""Course and student ids (like product ids)."""
MAX_ENROLLMENT_ID = 64
"""An enrollment id is a saga id: the timeline's ``saga_id`` column holds 64 (like orders)."""

EntityId = Annotated[str, Field(min_length=1, max_length=MAX_ID, pattern=ENTITY_ID_PATTERN)]
EnrollmentId = Annotated[
    str, Field(min_length=1, max_length=MAX_ENROLLMENT_ID, pattern=ENTITY_ID_PATTERN)
]
ReservationId = Annotated[
    str, Field(min_length=1, max_length=MAX_ENROLLMENT_ID + 12, pattern=ENTITY_ID_PATTERN)
]
Count = Annotated[int, Field(ge=0, le=MAX_UNITS)]
MAX_SEATS = 1000
"""Most seats a course has, and most requests its waitlist keeps: every course fact carries
the roster (up to 1000 student ids and 1000 queue entries, about 300 KB at the longest ids),
which must fit a record (512 KiB, ``sagas/untrusted.py``)."""
MAX_STUDENT_ENROLLMENTS = 100
"""Most enrollments a student holds or has at once (0-credit courses cost no credits), so a
student fact stays small too."""
Name = Annotated[str, Field(min_length=1, max_length=200)]
Reason = Annotated[str, Field(max_length=1000)]

EnrollmentStatus = Literal[
    "PENDING", "WAITLISTED", "ENROLLED", "TRANSFERRING", "REJECTED", "DROPPED"
]
FINAL_STATUSES: frozenset[str] = frozenset({"REJECTED", "DROPPED"})
FAILED_STATUSES: frozenset[str] = frozenset({"REJECTED"})
"""A drop is the student's wish, not a failure; a rejection is."""
SETTLED_STATUSES: frozenset[str] = FINAL_STATUSES | {"WAITLISTED", "ENROLLED"}
"""No outcome pending: a client waiting (``?wait=``) stops here; a drop, a transfer or a
promotion may still continue the saga from the two that are not final."""


def reservation_id(enrollment_id: str, attempt: int) -> str:
    """The id of an enrollment's ``attempt``-th seat request (0: enrolling, n: n-th transfer)."""
    return f"{enrollment_id}:t{attempt}"


class WaitlistEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enrollment_id: EnrollmentId
    student_id: EntityId
    position: int = Field(ge=1, le=MAX_UNITS)
    """1 for the head of the queue."""


class StudentEnrollment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enrollment_id: EnrollmentId
    course_id: EntityId
    credits: Count
    status: Literal["held", "enrolled"]
    """``held``: credits held while the enrollment (or a transfer into this course) is under
    way; ``enrolled``: confirmed."""


# --- course: commands ---------------------------------------------------------------------


class SetCourse(Message):
    """Create or change a course. A capacity below the seats taken (enrolled + held) is
    refused (:class:`CourseChangeRefused`)."""

    TYPE = "course.Set"
    title: Name
    capacity: int = Field(ge=0, le=MAX_SEATS)
    credits: Count


class ReserveSeat(Message):
    """Hold a seat for ``reservation_id`` until confirmed, released or expired; when the
    course is full, queue it (``waitlist``) or refuse it."""

    TYPE = "course.ReserveSeat"
    reservation_id: ReservationId
    enrollment_id: EnrollmentId
    student_id: EntityId
    waitlist: bool
    ttl_seconds: float = Field(gt=0, le=86_400)


class ConfirmSeat(Message):
    TYPE = "course.ConfirmSeat"
    reservation_id: ReservationId


class ReleaseSeat(Message):
    """Compensation and drop: give back a held or confirmed seat, or leave the waitlist."""

    TYPE = "course.ReleaseSeat"
    reservation_id: ReservationId


# --- course: facts (replies and domain events) --------------------------------------------


class CourseFact(Message):
    """Every course fact carries the roster after it (the ``course_roster`` read model)."""

    title: str
    capacity: int
    credits: int
    held: int
    enrolled: tuple[str, ...]
    """Student ids with a confirmed seat, in the order they were confirmed."""
    waitlist: tuple[WaitlistEntry, ...]


class CourseSet(CourseFact):
    TYPE = "course.CourseSet"
    SUMMARY = Summary("course set: {capacity} seats, {credits} credits")


class CourseChangeRefused(CourseFact):
    TYPE = "course.ChangeRefused"
    SUMMARY = Summary("course change refused: {reason}")
    requested_capacity: int
    reason: str


class SeatHeld(CourseFact):
    TYPE = "course.SeatHeld"
    SUMMARY = Summary(
        "seat held for {student_id} until {expires_at}",
        when="promoted",
        then="promoted from the waitlist: seat held for {student_id} until {expires_at}",
    )
    reservation_id: str
    student_id: str
    course_credits: int
    expires_at: str
    promoted: bool = False


class Waitlisted(CourseFact):
    TYPE = "course.Waitlisted"
    SUMMARY = Summary("course full: {student_id} waitlisted at position {position}")
    reservation_id: str
    student_id: str
    position: int


class SeatRefused(CourseFact):
    TYPE = "course.SeatRefused"
    SUMMARY = Summary("seat refused: {reason}")
    reservation_id: str
    reason: str


class SeatConfirmed(CourseFact):
    TYPE = "course.SeatConfirmed"
    SUMMARY = Summary("seat confirmed for {student_id}")
    reservation_id: str
    student_id: str


class SeatConfirmRefused(CourseFact):
    TYPE = "course.SeatConfirmRefused"
    SUMMARY = Summary("seat confirm refused: {reason}")
    reservation_id: str
    reason: str


class SeatReleased(CourseFact):
    """A seat given back (a hold cancelled or expired, a confirmed seat dropped) or a
    waitlisted request that left the queue (``dequeued``)."""

    TYPE = "course.SeatReleased"
    COMPENSATION = True
    SUMMARY = Summary("seat of {student_id} released ({reason})")
    reservation_id: str
    student_id: str
    reason: Literal["cancelled", "expired", "refunded", "dequeued"]


class WaitlistMoved(Message):
    """A reply only: a queued request's new position after someone ahead left the queue."""

    TYPE = "course.WaitlistMoved"
    SUMMARY = Summary("moved up to position {position} of the waitlist")
    reservation_id: str
    position: int


# --- student: commands --------------------------------------------------------------------


class SetStudent(Message):
    """Create or change a student. ``max_credits`` below the credits taken (used + held) is
    refused (:class:`StudentChangeRefused`)."""

    TYPE = "student.Set"
    name: Name
    max_credits: Count


class HoldCredits(Message):
    """Check the student may take ``course_id`` and hold its credits. A transfer names the
    reservation it ``replaces``: only the difference is held, and confirming swaps them."""

    TYPE = "student.HoldCredits"
    reservation_id: ReservationId
    enrollment_id: EnrollmentId
    course_id: EntityId
    credits: Count
    replaces: ReservationId | None = None


class ConfirmCredits(Message):
    TYPE = "student.ConfirmCredits"
    reservation_id: ReservationId


class ReleaseCredits(Message):
    """Compensation and drop: give back held or confirmed credits."""

    TYPE = "student.ReleaseCredits"
    reservation_id: ReservationId


# --- student: facts -----------------------------------------------------------------------


class StudentFact(Message):
    """Every student fact carries the student's totals and enrollments after it."""

    name: str
    max_credits: int
    credits_used: int
    credits_held: int
    enrollments: tuple[StudentEnrollment, ...]


class StudentSet(StudentFact):
    TYPE = "student.StudentSet"
    SUMMARY = Summary("student {name} set: at most {max_credits} credits")


class StudentChangeRefused(StudentFact):
    TYPE = "student.ChangeRefused"
    SUMMARY = Summary("student change refused: {reason}")
    requested_max_credits: int
    reason: str


class CreditsHeld(StudentFact):
    TYPE = "student.CreditsHeld"
    SUMMARY = Summary("{held} credit(s) held for {course_id}")
    reservation_id: str
    course_id: str
    held: int


class CreditsRefused(StudentFact):
    TYPE = "student.CreditsRefused"
    SUMMARY = Summary("student check failed: {reason}")
    reservation_id: str
    reason: str


class CreditsConfirmed(StudentFact):
    TYPE = "student.CreditsConfirmed"
    SUMMARY = Summary("credits confirmed for {course_id}")
    reservation_id: str
    course_id: str


class CreditsConfirmRefused(StudentFact):
    TYPE = "student.CreditsConfirmRefused"
    SUMMARY = Summary("credits confirm refused: {reason}")
    reservation_id: str
    reason: str


class CreditsReleased(StudentFact):
    TYPE = "student.CreditsReleased"
    COMPENSATION = True
    SUMMARY = Summary("credits for {course_id} released ({reason})")
    reservation_id: str
    course_id: str
    reason: Literal["cancelled", "refunded"]


# --- the enrollment saga: commands --------------------------------------------------------


class Enroll(Message):
    TYPE = "enrollment.Enroll"
    student_id: EntityId
    course_id: EntityId
    waitlist: bool = True


class Drop(Message):
    TYPE = "enrollment.Drop"
    reason: Reason = "dropped by the student"


class Transfer(Message):
    TYPE = "enrollment.Transfer"
    course_id: EntityId


# --- the enrollment saga: facts -----------------------------------------------------------


class EnrollmentRequested(Message):
    TYPE = "enrollment.Requested"
    # The saga starts PENDING with this fact (no status event says so): the timeline says it.
    SUMMARY = Summary("{student_id} asked to enroll in {course_id}; status PENDING")
    student_id: str
    course_id: str
    waitlist: bool


class EnrollmentStatusChanged(Message):
    """The enrollment moved to ``status`` in ``course_id`` (its course now: the new one once
    a transfer is done); ``reason`` says why it failed or why a transfer was refused."""

    TYPE = "enrollment.StatusChanged"
    SUMMARY = Summary(
        "status {status} in {course_id}", when="reason", then="status {status}: {reason}"
    )
    status: EnrollmentStatus
    course_id: str
    reason: str | None = None
    waitlist_position: int | None = None
    transfer_to: str | None = None
    """The course a transfer is moving to, while ``TRANSFERRING``."""


class CommandRefused(Message):
    """A drop or a transfer the enrollment cannot take in its status (nothing changes)."""

    TYPE = "enrollment.CommandRefused"
    SUMMARY = Summary("{command} refused: {reason}")
    command: Literal["drop", "transfer"]
    status: str
    reason: str


SEATS = Port(
    held=SeatHeld,
    also=(Waitlisted, WaitlistMoved),
    refused=SeatRefused,
    confirmed=SeatConfirmed,
    confirm_refused=SeatConfirmRefused,
    released=SeatReleased,
    confirm=lambda rid: ConfirmSeat(reservation_id=rid),
    release=lambda rid: ReleaseSeat(reservation_id=rid),
)
"""A course's seats as a saga reserves them (sagas/machinery/legs.py)."""
CREDITS = Port(
    held=CreditsHeld,
    refused=CreditsRefused,
    confirmed=CreditsConfirmed,
    confirm_refused=CreditsConfirmRefused,
    released=CreditsReleased,
    confirm=lambda rid: ConfirmCredits(reservation_id=rid),
    release=lambda rid: ReleaseCredits(reservation_id=rid),
)
"""A student's credits as a saga reserves them (sagas/machinery/legs.py)."""
