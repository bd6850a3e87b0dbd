"""Legacy enrollments into the enrollment domain (``SAGALINE_CDC_DRIVES_ENROLLMENT``).

The correlator sends every business event that names a student to this process, keyed by
the student id. A ``legacy.StudentEnrolled`` starts an enrollment saga for that student
and course, so the roster and the seat limits see legacy enrollments too; a
``legacy.EnrollmentDropped`` drops it.

Two kinds of instance share the channel:

- **a student's** (key: the legacy student id) remembers, per course, the enrollment it
  started. The enrollment id derives from the legacy action (student, course and the
  source transactions of the event): the same action, delivered again under any message
  id, finds its enrollment already there and starts nothing; and were that memory ever
  lost, the enrollment saga itself keeps the first ``Enroll`` of an id and ignores the
  rest. A drop looks the enrollment up and sends ``enrollment.Drop`` to it.
- **an enrollment's** (key: that enrollment id) does the upserts, then starts the saga.

**Ordering.** ``course.Set`` goes to the course topic, ``enrollment.Enroll`` to the saga's;
the saga then sends its ``course.ReserveSeat`` to the course topic. Sent together, nothing
orders the Set before the reservation (two partitions, and a producer retry may append the
first after the second). So the enrollment's instance sends the Sets with itself as
``reply_to`` and sends the ``Enroll`` only once the course *and* the student have answered
(set, or refused: a refused change leaves the entity as it was, and the saga's own
requests decide the rest). A reply is made after its Set was decided, so every later
request of the saga lands behind the Set on that entity's partition.

**Ids the domain refuses.** Legacy ids may be any text up to 100 characters; the domain's
ids must match ``ENTITY_ID_PATTERN``. An enrollment or a drop whose ids do not fit is not
mirrored: a ``legacy.NotMirrored`` fact says so (visible on the domain-event topic, with
the ids and the reason), and nothing else happens. Not a dead letter: the record is valid,
the domain just cannot hold it. A row value the domain cannot take (a capacity above
``MAX_SEATS``, no capacity, negative credits...) skips that one upsert: the saga then
meets the entity as the domain already has it (an unknown course refuses the seat).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from sagas.contracts import enrollment as e
from sagas.contracts import legacy as lg
from sagas.contracts.ledger import MAX_UNITS
from sagas.ids import derive_id
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Command, Context, Decision, Fact
from sagas.messages import Message

_ID = re.compile(e.ENTITY_ID_PATTERN)
ENROLLMENT_PREFIX = "legacy-"
"""Enrollment ids this process derives: ``legacy-`` and 32 hex digits (39 characters, under
the saga id's 64)."""


def enrollment_id(student_id: str, course_id: str, tx_ids: tuple[int, ...]) -> str:
    """The enrollment a legacy action starts: the same action always names the same one."""
    action = "/".join([student_id, course_id, *map(str, tx_ids)])
    return ENROLLMENT_PREFIX + derive_id("legacy-enrollment", action)


def unfit_ids(*ids: str) -> str | None:
    """Why the domain cannot take these ids, or None."""
    for ident in ids:
        if len(ident) > e.MAX_ID or not _ID.match(ident):
            return f"id {ident[:100]!r} does not match the domain's {e.ENTITY_ID_PATTERN}"
    return None


class Waiting(BaseModel):
    """An enrollment instance: what it upserts and starts, and the answers still due."""

    model_config = ConfigDict(frozen=True)
    student_id: str
    course_id: str
    awaiting: frozenset[Literal["course", "student"]]
    enroll_sent: bool = False


class LegacyDomainState(BaseModel):
    model_config = ConfigDict(frozen=True)
    enrollments: dict[str, str] = {}
    """A student instance: course id -> the enrollment id its latest legacy enrollment
    started (the entry goes when the enrollment is dropped)."""
    pending: Waiting | None = None
    """An enrollment instance."""


@dataclass(frozen=True)
class LegacyDomain:
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        # Every business event the correlator's last stage sends (most move nothing here).
        lg.StudentEnrolled,
        lg.EnrollmentChanged,
        lg.EnrollmentDropped,
        lg.StudentUpdated,
        lg.CourseUpdated,
        lg.MirrorEnrollment,
        # The replies to the course and student upserts that come before an Enroll.
        e.CourseSet,
        e.CourseChangeRefused,
        e.StudentSet,
        e.StudentChangeRefused,
    )
    FACTS: ClassVar[tuple[type[Message], ...]] = (lg.EnrollmentMirrored, lg.NotMirrored)
    KEY: ClassVar[str] = (
        "the legacy student id (business events; course:<id> for a course row alone), or "
        "the enrollment id it starts (its MirrorEnrollment and the upserts' replies)"
    )

    name: str = "legacy-domain"
    entity_type: str = "legacy-student"
    enrollments: str = "enrollment-saga"
    courses: str = "course"
    students: str = "student"
    state_type: type[LegacyDomainState] = LegacyDomainState

    def initial(self, key: str) -> LegacyDomainState:
        return LegacyDomainState()

    def is_final(self, state: LegacyDomainState) -> bool:
        """An enrollment instance whose Enroll was sent has nothing left to do: it retires
        (sagas/machinery/retirement.py); a student's instance is live and never does."""
        return state.pending is not None and state.pending.enroll_sent

    def decide(
        self, state: LegacyDomainState, message: Message, ctx: Context
    ) -> Decision[LegacyDomainState]:
        match message:
            case lg.StudentEnrolled():
                return self._enrolled(state, message, ctx)
            case lg.EnrollmentDropped():
                return self._dropped(state, message, ctx)
            case lg.MirrorEnrollment():
                return self._mirror(state, message, ctx)
            case e.CourseSet() | e.CourseChangeRefused():
                return self._answered(state, "course", ctx)
            case e.StudentSet() | e.StudentChangeRefused():
                return self._answered(state, "student", ctx)
        # Other business events (changes, updates) do not move the enrollment domain.
        return Decision(state)

    def on_deadline(
        self, state: LegacyDomainState, name: str, ctx: Context
    ) -> Decision[LegacyDomainState]:
        return Decision(state)

    # --- a student's instance -----------------------------------------------------------

    def _enrolled(
        self, state: LegacyDomainState, event: lg.StudentEnrolled, ctx: Context
    ) -> Decision[LegacyDomainState]:
        if why := unfit_ids(event.student_id, event.course_id):
            return self._not_mirrored(state, "enroll", event, why)
        enrollment = enrollment_id(event.student_id, event.course_id, event.tx_ids)
        if state.enrollments.get(event.course_id) == enrollment:
            return Decision(state)  # this very action again
        mirror = lg.MirrorEnrollment(
            student_id=event.student_id,
            course_id=event.course_id,
            course=event.course,
            student=event.student,
        )
        mirrored = lg.EnrollmentMirrored(
            student_id=event.student_id,
            course_id=event.course_id,
            enrollment_id=enrollment,
            tx_ids=event.tx_ids,
        )
        new = checked_copy(
            state, {"enrollments": {**state.enrollments, event.course_id: enrollment}}
        )
        return Decision(
            new,
            send=(Command(self.name, enrollment, mirror, saga_id=enrollment),),
            events=(Fact(mirrored, enrollment),),
        )

    def _dropped(
        self, state: LegacyDomainState, event: lg.EnrollmentDropped, ctx: Context
    ) -> Decision[LegacyDomainState]:
        if why := unfit_ids(event.student_id, event.course_id):
            return self._not_mirrored(state, "drop", event, why)
        enrollment = state.enrollments.get(event.course_id)
        if enrollment is None:
            why = "no enrollment in this course was mirrored"
            return self._not_mirrored(state, "drop", event, why)
        rest = {c: i for c, i in state.enrollments.items() if c != event.course_id}
        # Sent even while the enrollment instance still waits for its upserts: a Drop that
        # reaches the saga before its Enroll ends it DROPPED, and the Enroll is then ignored.
        drop = e.Drop(reason=f"dropped in the legacy database (transaction {_txs(event)})")
        return Decision(
            checked_copy(state, {"enrollments": rest}),
            send=(Command(self.enrollments, enrollment, drop, saga_id=enrollment),),
        )

    def _not_mirrored(
        self,
        state: LegacyDomainState,
        action: Literal["enroll", "drop"],
        event: lg.StudentEnrolled | lg.EnrollmentDropped,
        why: str,
    ) -> Decision[LegacyDomainState]:
        fact = lg.NotMirrored(
            action=action,
            student_id=event.student_id,
            course_id=event.course_id,
            reason=why,
            tx_ids=event.tx_ids,
        )
        return Decision(state, events=(fact,))

    # --- an enrollment's instance ---------------------------------------------------------

    def _mirror(
        self, state: LegacyDomainState, cmd: lg.MirrorEnrollment, ctx: Context
    ) -> Decision[LegacyDomainState]:
        if state.pending is not None:
            return Decision(state)  # started already
        send: list[Command] = []
        awaiting: set[Literal["course", "student"]] = set()
        if (course := course_set(cmd.course)) is not None:
            send.append(self._ask(self.courses, cmd.course_id, course, ctx))
            awaiting.add("course")
        if (student := student_set(cmd.student)) is not None:
            send.append(self._ask(self.students, cmd.student_id, student, ctx))
            awaiting.add("student")
        waiting = Waiting(
            student_id=cmd.student_id, course_id=cmd.course_id, awaiting=frozenset(awaiting)
        )
        return self._enroll_when_answered(LegacyDomainState(pending=waiting), ctx, tuple(send))

    def _answered(
        self, state: LegacyDomainState, who: Literal["course", "student"], ctx: Context
    ) -> Decision[LegacyDomainState]:
        if state.pending is None or who not in state.pending.awaiting:
            return Decision(state)  # a repeated answer
        waiting = checked_copy(state.pending, {"awaiting": state.pending.awaiting - {who}})
        return self._enroll_when_answered(checked_copy(state, {"pending": waiting}), ctx)

    def _enroll_when_answered(
        self, state: LegacyDomainState, ctx: Context, send: tuple[Command, ...] = ()
    ) -> Decision[LegacyDomainState]:
        waiting = state.pending
        assert waiting is not None
        if waiting.awaiting or waiting.enroll_sent:
            return Decision(state, send=send)
        enroll = e.Enroll(student_id=waiting.student_id, course_id=waiting.course_id)
        sent = checked_copy(state, {"pending": checked_copy(waiting, {"enroll_sent": True})})
        return Decision(
            sent, send=(*send, Command(self.enrollments, ctx.key, enroll, saga_id=ctx.key))
        )

    def _ask(self, channel: str, key: str, message: Message, ctx: Context) -> Command:
        return Command(channel, key, message, saga_id=ctx.key, reply_to=self.name)


def course_set(row: lg.CourseRow | None) -> e.SetCourse | None:
    """The upsert a legacy course row makes, or None when the domain cannot take its values
    (no capacity, a capacity over ``MAX_SEATS``, negative credits)."""
    if row is None or row.capacity is None or not 0 <= row.capacity <= e.MAX_SEATS:
        return None
    credits = 0 if row.credits is None else row.credits
    if not 0 <= credits <= MAX_UNITS:
        return None
    return e.SetCourse(title=_name(row.title, row.id), capacity=row.capacity, credits=credits)


def student_set(row: lg.StudentRow | None) -> e.SetStudent | None:
    """The upsert a legacy student row makes, or None (no or an impossible ``max_credits``)."""
    if row is None or row.max_credits is None or not 0 <= row.max_credits <= MAX_UNITS:
        return None
    return e.SetStudent(name=_name(row.name, row.id), max_credits=row.max_credits)


def _name(text: str | None, fallback: str) -> str:
    """A domain name (1-200 characters) from a legacy column that may be empty or long."""
    return (text.strip() if text and text.strip() else fallback)[:200]


def _txs(event: lg.EnrollmentDropped) -> str:
    return ",".join(map(str, event.tx_ids)) or "unknown"
