"""The legacy CDC correlator, stage 2: one action spread over several transactions -> one event.

Stage 1 (:mod:`sagas.definitions.legacy_correlator`) turns each source transaction into its
business events and sends each, as an :class:`ActionPart`, to this process, keyed by the
entity it is about (:func:`action_key`): ``student:<id>`` for an enrollment, a drop, a
move or a student row; ``course:<id>`` for a course row alone. A legacy action made of
three transactions (the student, the course, then the link) therefore arrives here as
three parts on two keys: ``StudentUpdated(created)`` and ``StudentEnrolled`` at the
student, ``CourseUpdated(created)`` at the course. Merging them:

- **Student side (one key, no race).** A new enrollment that did not create its student
  absorbs a creation of that student still unpublished here, and the other way round: a
  creation absorbs into an unpublished enrollment that lacks it. The merged event takes the
  earlier of the two places in the key's queue.
- **Course side (by message).** An enrollment that did not create its course sends
  :class:`ClaimCourse` to ``course:<id>``. The course instance is the only one that decides
  who publishes its creation: it gives an unpublished creation to the first claim
  (``CourseClaimAnswered(created=True)``) and publishes nothing of it; with none it keeps
  the claim for ``hold`` and gives it a creation arriving meanwhile, or answers
  ``created=False`` (with the latest course row it knows) when the hold ends. The
  enrollment is published only once it has its answer, so a course creation is carried by
  exactly one event: the enrollment's, or the course's own ``CourseUpdated``.

Each key publishes in arrival order (a FIFO of unpublished events): an event waits behind
an earlier one still holding, so a consumer never sees an update before the creation.

Timing (``W`` = ``SAGALINE_CDC_WINDOW_S``, ``hold`` = 2W by default):

- stage 1 closes a transaction when its END record says all its rows are in (at once,
  normally), at the latest W after its first row;
- here, a creation (student or course) alone is held ``hold`` after its part arrives; an
  enrollment that lacks its student waits ``hold`` for it (no wait when the student is
  known to have existed before: an earlier part showed it updated, or its creation was
  published); a claim waits ``hold`` at the course (answered at once when the course holds
  a creation, or is known to have existed before). ``hold`` is 2W because the parts of
  one action whose transactions lie within W of each other reach this stage up to 2W apart
  (one transaction closed at once by its END record, another only by its window).
- Worst-case delay of an event after its last row reached stage 1: W (stage 1, without END
  records) + ``hold`` (2W) = **3W**, plus hops and the tick interval; with END records 2W.
  Updates, drops and moves are published at once unless queued behind a held event of the
  same entity (then as late as it).

Late parts (after a hold ended) are never lost and never make a second enrollment: a
creation that comes after its enrollment was published is published alone
(``StudentUpdated``/``CourseUpdated`` with ``created=True``); an enrollment that comes after
its student's or course's creation was published carries ``student_created`` /
``course_created`` false, and the rows the correlator last saw.

Duplicates: a part whose ``part_id`` was processed, or a claim whose id was answered, is
dropped (besides the machinery's own window of message ids).

Retention: a key whose queue and claims are empty is reset to its initial state
``retention`` after its last message (the ``expire`` deadline), which is final
(``is_final``): the key retires, then its marker expires and the key is deleted
(sagas/machinery/retirement.py). A part redelivered after the reset is caught by the
machinery's message ids until the key retires, then dropped by its marker; stage 1 does not
send one again (see its retention).

Into the domain: with ``domain_channel`` set, every business event published is also sent,
as a command, to that channel, keyed by :func:`domain_key`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from sagas.contracts.legacy import (
    ActionPart,
    BusinessEvent,
    ClaimCourse,
    CourseClaimAnswered,
    CourseRow,
    CourseUpdated,
    EnrollmentChanged,
    EnrollmentDropped,
    StudentEnrolled,
    StudentRow,
    StudentUpdated,
)
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Command, Context, Decision
from sagas.messages import Message

WAKE_DEADLINE = "wake"
"""The earliest hold of the key ends: publish or answer what is due."""
EXPIRE_DEADLINE = "expire"
"""Retention: the key has been idle that long; reset it."""
MAX_SEEN = 1000
"""Part and claim ids a key remembers (until it expires); an entity has a handful a day."""
MAX_CLAIMS = 500
"""Claims a course keeps waiting for its creation. A bulk statement enrolling thousands of
students in one course this stage never saw sends it a claim each: kept all, they made the
course's record grow past what its changelog takes (~200 bytes a claim, ~1 MB). Past this
many, a claim is answered at once (see :meth:`ActionCorrelator._claim`); 500 keep the record
under ~100 KB, and under ~350 KB with the longest student ids."""


def action_key(event: BusinessEvent) -> str:
    """The stage-2 key of a business event: its student, or its course for a course row alone."""
    if isinstance(event, CourseUpdated):
        return f"course:{event.course_id}"
    return f"student:{event.student_id}"


def domain_key(event: BusinessEvent) -> str:
    """The key of a business event sent into the domain: the student id; a course row alone
    (which has no student) goes under ``course:<id>``."""
    if isinstance(event, CourseUpdated):
        return f"course:{event.course_id}"
    return event.student_id


class Waiting(BaseModel):
    """One event of this key not published yet."""

    model_config = ConfigDict(frozen=True)
    event: BusinessEvent
    lsn: int
    until: datetime | None = None
    """Held until then (a creation waiting for its enrollment, an enrollment waiting for
    its student's creation); None: no wait."""
    claim: str | None = None
    """An enrollment waiting for its course's answer to this claim."""

    def ready(self, now: datetime) -> bool:
        return (self.until is None or self.until <= now) and self.claim is None


class Claim(BaseModel):
    """Course side: an enrollment's claim waiting for a creation of this course."""

    model_config = ConfigDict(frozen=True)
    claim_id: str
    student_id: str
    until: datetime


class ActionState(BaseModel):
    """The state of one ``student:<id>`` or ``course:<id>`` key."""

    model_config = ConfigDict(frozen=True)
    queue: tuple[Waiting, ...] = ()
    claims: tuple[Claim, ...] = ()
    student: StudentRow | None = None
    course: CourseRow | None = None
    row_lsn: int = -1
    """The LSN of the latest row above: an older image never replaces a newer one."""
    existed: bool = False
    """The entity existed before: a part showed it updated, or its creation was published.
    No creation of it can still come, so nothing waits for one."""
    seen: tuple[str, ...] = ()
    """Part ids and claim ids processed."""

    @property
    def idle(self) -> bool:
        return not self.queue and not self.claims


@dataclass(frozen=True)
class ActionCorrelator:
    """Pure: ``hold`` and ``retention`` come from the settings, ``now`` from the machinery."""

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (ActionPart, ClaimCourse, CourseClaimAnswered)
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        StudentEnrolled,
        EnrollmentChanged,
        EnrollmentDropped,
        StudentUpdated,
        CourseUpdated,
    )
    KEY: ClassVar[str] = "student:<student id>, or course:<course id> for a course row alone"

    hold: timedelta = timedelta(seconds=20)
    retention: timedelta = timedelta(hours=1)
    domain_channel: str | None = None
    name: str = "legacy-actions"
    entity_type: str = "legacy"
    state_type: type[ActionState] = ActionState

    def initial(self, key: str) -> ActionState:
        return ActionState()

    def is_final(self, state: ActionState) -> bool:
        """Idle: its ``expire`` deadline reset it (sagas/machinery/retirement.py)."""
        return state == ActionState()

    def decide(self, state: ActionState, message: Message, ctx: Context) -> Decision[ActionState]:
        match message:
            case ActionPart() if message.part_id not in state.seen:
                new, send = self._part(_remember(state, message.part_id), message, ctx)
            case ClaimCourse() if message.claim_id not in state.seen:
                new, send = self._claim(_remember(state, message.claim_id), message, ctx)
            case CourseClaimAnswered():
                new, send = _answered(state, message), ()
            case _:
                return Decision(state)  # a duplicate, or not for this stage
        return self._settle(new, send, ctx)

    def on_deadline(self, state: ActionState, name: str, ctx: Context) -> Decision[ActionState]:
        if name == EXPIRE_DEADLINE:
            if state.idle:
                return Decision(ActionState(), clear_deadlines=frozenset({WAKE_DEADLINE}))
            return self._settle(state, (), ctx)  # still busy: look again later
        if name != WAKE_DEADLINE:
            return Decision(state)
        due = [c for c in state.claims if c.until <= ctx.now]
        rest = tuple(c for c in state.claims if c.until > ctx.now)
        answers = tuple(self._answer(c, state.course, None) for c in due)
        return self._settle(checked_copy(state, {"claims": rest}), answers, ctx)

    # --- parts ------------------------------------------------------------------------

    def _part(
        self, state: ActionState, part: ActionPart, ctx: Context
    ) -> tuple[ActionState, tuple[Command, ...]]:
        event = part.event
        state = _learn(state, event, part.lsn)
        item = Waiting(event=event, lsn=part.lsn)
        match event:
            case StudentEnrolled():
                return self._enrolled(state, item, event, ctx)
            case StudentUpdated(created=True):
                return self._student_created(state, item, ctx), ()
            case CourseUpdated(created=True):
                return self._course_created(state, item, event, ctx)
        return _enqueue(state, item), ()

    def _enrolled(
        self, state: ActionState, item: Waiting, event: StudentEnrolled, ctx: Context
    ) -> tuple[ActionState, tuple[Command, ...]]:
        send: tuple[Command, ...] = ()
        if not event.course_created:
            claim_id = ctx.child_id(f"claim/{event.course_id}")
            claim = ClaimCourse(
                claim_id=claim_id, student_id=event.student_id, course_id=event.course_id
            )
            send = (Command(self.name, f"course:{event.course_id}", claim),)
            item = checked_copy(item, {"claim": claim_id})
        if event.student_created:
            return _enqueue(state, item), send
        creation = _first(state.queue, _is_student_creation)
        if creation is not None:  # the student was created earlier in this action
            merged = checked_copy(item, {"event": _with_student(item, state.queue[creation])})
            return _replace(state, creation, merged), send
        if not state.existed:  # its creation may still come
            item = checked_copy(item, {"until": ctx.now + self.hold})
        return _enqueue(state, item), send

    def _student_created(self, state: ActionState, item: Waiting, ctx: Context) -> ActionState:
        enrollment = _first(state.queue, _lacks_student)
        if enrollment is None:
            return _enqueue(state, checked_copy(item, {"until": ctx.now + self.hold}))
        waiting = state.queue[enrollment]
        merged = checked_copy(waiting, {"event": _with_student(waiting, item), "until": None})
        return _replace(state, enrollment, merged)

    def _course_created(
        self, state: ActionState, item: Waiting, event: CourseUpdated, ctx: Context
    ) -> tuple[ActionState, tuple[Command, ...]]:
        if not state.claims:
            return _enqueue(state, checked_copy(item, {"until": ctx.now + self.hold})), ()
        first, rest = state.claims[0], state.claims[1:]
        answer = self._answer(first, state.course, event)
        return checked_copy(state, {"claims": rest, "existed": True}), (answer,)

    # --- claims -----------------------------------------------------------------------

    def _claim(
        self, state: ActionState, claim: ClaimCourse, ctx: Context
    ) -> tuple[ActionState, tuple[Command, ...]]:
        creation = _first(state.queue, _is_course_creation)
        if creation is not None:  # the course was created within the hold: it is the claim's
            held = state.queue[creation].event
            assert isinstance(held, CourseUpdated)
            queue = state.queue[:creation] + state.queue[creation + 1 :]
            answer = self._answer_claim(claim.claim_id, claim.student_id, state.course, held)
            return checked_copy(state, {"queue": queue, "existed": True}), (answer,)
        if state.existed:  # no creation of this course can come any more
            return state, (self._answer_claim(claim.claim_id, claim.student_id, state.course),)
        if len(state.claims) >= MAX_CLAIMS:
            # A creation goes to the oldest claim waiting, and claims end their holds in
            # arrival order: this one could carry it only if it came after the holds of the
            # MAX_CLAIMS before it ended. Such a creation is published alone instead
            # (``CourseUpdated``, created), as after any hold: never lost, never twice.
            return state, (self._answer_claim(claim.claim_id, claim.student_id, state.course),)
        waiting = Claim(
            claim_id=claim.claim_id, student_id=claim.student_id, until=ctx.now + self.hold
        )
        return checked_copy(state, {"claims": (*state.claims, waiting)}), ()

    def _answer(
        self, claim: Claim, row: CourseRow | None, created: CourseUpdated | None
    ) -> Command:
        return self._answer_claim(claim.claim_id, claim.student_id, row, created)

    def _answer_claim(
        self,
        claim_id: str,
        student_id: str,
        row: CourseRow | None,
        created: CourseUpdated | None = None,
    ) -> Command:
        answer = CourseClaimAnswered(
            claim_id=claim_id,
            course=row if row is not None or created is None else created.course,  # newest
            created=created is not None,
            tx_ids=created.tx_ids if created is not None else (),
        )
        return Command(self.name, f"student:{student_id}", answer)

    # --- publishing -------------------------------------------------------------------

    def _settle(
        self, state: ActionState, send: tuple[Command, ...], ctx: Context
    ) -> Decision[ActionState]:
        """Publish the ready head of the queue, and set the deadlines for what remains."""
        published: list[BusinessEvent] = []
        queue = state.queue
        while queue and queue[0].ready(ctx.now):
            published.append(_filled(queue[0].event, state))
            queue = queue[1:]
        existed = state.existed or any(_carries_creation(e) for e in published)
        state = checked_copy(state, {"queue": queue, "existed": existed})
        into_domain = tuple(
            Command(self.domain_channel, domain_key(e), e)
            for e in published
            if self.domain_channel is not None
        )
        holds = [w.until for w in queue if w.until is not None and w.until > ctx.now]
        holds += [c.until for c in state.claims]
        wake = {WAKE_DEADLINE: min(holds)} if holds else {}
        return Decision(
            state,
            send=(*send, *into_domain),
            events=tuple(published),
            set_deadlines={**wake, EXPIRE_DEADLINE: ctx.now + self.retention},
            clear_deadlines=frozenset() if holds else frozenset({WAKE_DEADLINE}),
        )


# --- small pure helpers ---------------------------------------------------------------


def _remember(state: ActionState, ident: str) -> ActionState:
    return checked_copy(state, {"seen": (*state.seen, ident)[-MAX_SEEN:]})


def _learn(state: ActionState, event: BusinessEvent, lsn: int) -> ActionState:
    """Keep the newest row of the key's entity; note that it existed before."""
    row: StudentRow | CourseRow | None = None
    existed = state.existed
    match event:
        case StudentUpdated():
            row, existed = event.student, existed or not event.created
        case CourseUpdated():
            row, existed = event.course, existed or not event.created
        case StudentEnrolled():
            row = event.student
            existed = existed or (event.student is not None and not event.student_created)
    update: dict[str, object] = {"existed": existed}
    if row is not None and lsn >= state.row_lsn:
        field = "student" if isinstance(row, StudentRow) else "course"
        update |= {field: row, "row_lsn": lsn}
    return checked_copy(state, update)


def _answered(state: ActionState, answer: CourseClaimAnswered) -> ActionState:
    """The course answered an enrollment's claim: the enrollment has its course now."""
    for i, waiting in enumerate(state.queue):
        if waiting.claim == answer.claim_id and isinstance(waiting.event, StudentEnrolled):
            event = waiting.event
            course = answer.course if answer.created or event.course is None else event.course
            event = checked_copy(
                event,
                {
                    "course": course,
                    "course_created": answer.created,
                    "tx_ids": _union(event.tx_ids, answer.tx_ids),
                },
            )
            return _replace(state, i, checked_copy(waiting, {"event": event, "claim": None}))
    return state  # answered already (a duplicate answer)


def _with_student(enrollment: Waiting, creation: Waiting) -> StudentEnrolled:
    """The enrollment carrying its student's creation, with the newer of the two rows."""
    event, created = enrollment.event, creation.event
    assert isinstance(event, StudentEnrolled) and isinstance(created, StudentUpdated)
    own_is_newer = event.student is not None and enrollment.lsn >= creation.lsn
    return checked_copy(
        event,
        {
            "student": event.student if own_is_newer else created.student,
            "student_created": True,
            "tx_ids": _union(event.tx_ids, created.tx_ids),
        },
    )


def _filled(event: BusinessEvent, state: ActionState) -> BusinessEvent:
    """An enrollment that saw no student row carries the latest one this key knows."""
    if isinstance(event, StudentEnrolled) and event.student is None and state.student:
        return checked_copy(event, {"student": state.student})
    return event


def _enqueue(state: ActionState, item: Waiting) -> ActionState:
    return checked_copy(state, {"queue": (*state.queue, item)})


def _replace(state: ActionState, index: int, item: Waiting) -> ActionState:
    """Put ``item`` (two events merged) at ``index``: the place of the one queued first."""
    queue = list(state.queue)
    queue[index] = item
    return checked_copy(state, {"queue": tuple(queue)})


def _first(queue: tuple[Waiting, ...], wanted: Callable[[BusinessEvent], bool]) -> int | None:
    return next((i for i, w in enumerate(queue) if wanted(w.event)), None)


def _is_student_creation(event: BusinessEvent) -> bool:
    return isinstance(event, StudentUpdated) and event.created


def _is_course_creation(event: BusinessEvent) -> bool:
    return isinstance(event, CourseUpdated) and event.created


def _carries_creation(event: BusinessEvent) -> bool:
    """Once published, no other creation of this key's entity can be merged any more."""
    if isinstance(event, StudentEnrolled):
        return event.student_created
    return _is_student_creation(event) or _is_course_creation(event)


def _lacks_student(event: BusinessEvent) -> bool:
    return isinstance(event, StudentEnrolled) and not event.student_created


def _union(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({*a, *b}))
