"""The enrollment saga: a student's seat in a course, from request to drop, via transfers.

Enroll: reserve a seat (or join the waitlist) -> check and hold the student's credits ->
confirm both -> ``ENROLLED``. A course that is full answers ``Waitlisted`` (the saga rests
in ``WAITLISTED`` until the course promotes it: a ``SeatHeld`` that arrives later, then
the same path) or refuses. A failed step releases what was taken: the seat (which lets the
course promote its next in line) and the credits.

Transfer (from ``ENROLLED``): reserve a seat in the new course (never a waitlist) -> hold
the credits difference -> confirm the new seat -> release the old one and confirm the
credits -> ``ENROLLED`` in the new course. Until the new seat is confirmed a failure only
gives back what the transfer took and the enrollment stays ``ENROLLED`` in the old course
with the reason; once it is confirmed the transfer can only go forward (a timeout repeats
the last commands, which are idempotent). So the student holds a seat in one of the two
courses at every moment, and exactly one once the saga settles.

Drop (from any status but a final one): release everything that may be held or confirmed,
in both courses during a transfer, and end ``DROPPED``. Releases are idempotent, and a
release for a course is sent after that course's request on the same partition, so it always
lands after it.

``ENROLLED`` and ``WAITLISTED`` are *settled*, not final: no reply is awaited (no step
deadline runs), yet a drop, a transfer or a promotion continues the saga.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict

from sagas.contracts import enrollment as e
from sagas.machinery.process import Command, Context, Decision, Fact
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Message

Progress = Literal[
    "none", "requested", "waitlisted", "held", "confirming", "confirmed", "releasing", "done"
]
"""Where one seat or one credit hold stands, as far as the saga knows. ``done``: refused or
given back (nothing to release)."""
STEP_DEADLINE = "step"
_TAKEN: frozenset[str] = frozenset({"requested", "waitlisted", "held", "confirming", "confirmed"})
"""A seat or hold that may exist at its participant: a failure releases it."""


class Place(BaseModel):
    """One seat request of this enrollment (its own, or a transfer's) and its credits."""

    model_config = ConfigDict(frozen=True)
    course_id: str
    attempt: int
    seat: Progress = "requested"
    credits: Progress = "none"

    def rid(self, enrollment_id: str) -> str:
        return e.reservation_id(enrollment_id, self.attempt)


class EnrollmentState(BaseModel):
    model_config = ConfigDict(frozen=True)
    status: e.EnrollmentStatus | None = None
    student_id: str = ""
    place: Place | None = None
    """The enrollment's course: requested, waitlisted, held or confirmed."""
    transfer: Place | None = None
    """The course a transfer is moving to, while ``TRANSFERRING``."""
    attempts: int = 0
    position: int | None = None
    reason: str | None = None

    @property
    def final(self) -> bool:
        return self.status in e.FINAL_STATUSES

    @property
    def course_id(self) -> str:
        return self.place.course_id if self.place else ""


@dataclass(frozen=True)
class EnrollmentSaga:
    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=e.EnrollmentStatusChanged,
        statuses=get_args(e.EnrollmentStatus),
        final=e.FINAL_STATUSES,
        settled=e.SETTLED_STATUSES,
        failed=e.FAILED_STATUSES,
        start=e.EnrollmentRequested,
    )
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        e.Enroll,
        e.Drop,
        e.Transfer,
        # The course's answers to ReserveSeat, ConfirmSeat and ReleaseSeat, and what it
        # tells a waitlisted request later (promoted: SeatHeld; moved up: WaitlistMoved).
        e.SeatHeld,
        e.Waitlisted,
        e.WaitlistMoved,
        e.SeatRefused,
        e.SeatConfirmed,
        e.SeatConfirmRefused,
        e.SeatReleased,
        # The student's answers to HoldCredits, ConfirmCredits and ReleaseCredits.
        e.CreditsHeld,
        e.CreditsRefused,
        e.CreditsConfirmed,
        e.CreditsConfirmRefused,
        e.CreditsReleased,
    )
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        e.EnrollmentRequested,
        e.EnrollmentStatusChanged,
        e.CommandRefused,
    )
    KEY: ClassVar[str] = "the enrollment id, which is also the saga id"
    name: str = "enrollment-saga"
    entity_type: str = "enrollment"
    courses: str = "course"
    students: str = "student"
    step_timeout: timedelta = timedelta(seconds=30)
    seat_ttl: timedelta = timedelta(minutes=5)
    state_type: type[EnrollmentState] = EnrollmentState

    def initial(self, key: str) -> EnrollmentState:
        return EnrollmentState()

    def is_final(self, state: EnrollmentState) -> bool:
        """A final enrollment (rejected, dropped) retires; a settled one (enrolled,
        waitlisted) stays (sagas/machinery/retirement.py)."""
        return state.final

    def decide(
        self, state: EnrollmentState, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        match message:
            case e.Enroll():
                return self._enroll(state, message, ctx)
            case e.Drop():
                return self._drop(state, message, ctx)
            case e.Transfer():
                return self._transfer(state, message, ctx)
        if state.status is None or state.final or state.place is None:
            return Decision(state)  # a late or stray reply; compensations were already sent
        # Every reply of a course or a student names the seat request it answers; which
        # request it is says which step it belongs to (a reply for none is stale).
        rid = getattr(message, "reservation_id", None)
        if rid == state.place.rid(ctx.key) and state.status in ("PENDING", "WAITLISTED"):
            return self._enrolling(state, state.place, message, ctx)
        if state.transfer is not None and rid == state.transfer.rid(ctx.key):
            return self._transferring(state, state.transfer, message, ctx)
        if rid == state.place.rid(ctx.key) and state.transfer is not None:
            return self._old_seat(state, state.transfer, message, ctx)
        return Decision(state)  # about an earlier request of this enrollment: settled already

    def on_deadline(
        self, state: EnrollmentState, name: str, ctx: Context
    ) -> Decision[EnrollmentState]:
        if name != STEP_DEADLINE or state.status is None or state.final:
            return Decision(state)
        if state.status == "PENDING":
            return self._fail(state, "REJECTED", "timeout", ctx)
        if state.status == "TRANSFERRING" and state.transfer is not None:
            t = state.transfer
            if t.seat == "confirmed":  # committed: repeat what is still unanswered
                return self._commit(state, t, ctx)
            return self._refuse_transfer(state, t, "timeout", ctx)
        return Decision(state)

    # --- commands -----------------------------------------------------------------------

    def _enroll(
        self, state: EnrollmentState, cmd: e.Enroll, ctx: Context
    ) -> Decision[EnrollmentState]:
        if state.status is not None:
            return Decision(state)  # this enrollment id is taken: the first request wins
        place = Place(course_id=cmd.course_id, attempt=0)
        new = EnrollmentState(status="PENDING", student_id=cmd.student_id, place=place)
        reserve = e.ReserveSeat(
            reservation_id=place.rid(ctx.key),
            enrollment_id=ctx.key,
            student_id=cmd.student_id,
            waitlist=cmd.waitlist,
            ttl_seconds=self.seat_ttl.total_seconds(),
        )
        requested = e.EnrollmentRequested(
            student_id=cmd.student_id, course_id=cmd.course_id, waitlist=cmd.waitlist
        )
        return Decision(
            new,
            send=(self._to_course(ctx, cmd.course_id, reserve),),
            # EnrollmentRequested says it is PENDING (STATUSES.start): no status event for it.
            events=(Fact(requested, ctx.key),),
            set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout},
        )

    def _drop(self, state: EnrollmentState, cmd: e.Drop, ctx: Context) -> Decision[EnrollmentState]:
        if state.status is None:
            # The drop overtook its enrollment: record it, so the enrollment is refused later.
            dropped = state.model_copy(update={"reason": cmd.reason})
            return self._end(dropped, "DROPPED", ctx)
        if state.final:
            refused = e.CommandRefused(
                command="drop", status=state.status, reason=f"enrollment is {state.status}"
            )
            return Decision(state, events=(Fact(refused, ctx.key),))
        return self._fail(state, "DROPPED", cmd.reason, ctx)

    def _transfer(
        self, state: EnrollmentState, cmd: e.Transfer, ctx: Context
    ) -> Decision[EnrollmentState]:
        if state.status != "ENROLLED" or state.place is None:
            why = f"enrollment is {state.status or 'unknown'}"
        elif cmd.course_id == state.place.course_id:
            why = f"already enrolled in {cmd.course_id}"
        else:
            attempt = state.attempts + 1
            target = Place(course_id=cmd.course_id, attempt=attempt)
            new = state.model_copy(
                update={"status": "TRANSFERRING", "transfer": target, "attempts": attempt}
            )
            reserve = e.ReserveSeat(
                reservation_id=target.rid(ctx.key),
                enrollment_id=ctx.key,
                student_id=state.student_id,
                waitlist=False,  # transfers never join a waitlist
                ttl_seconds=self.seat_ttl.total_seconds(),
            )
            return self._move(new, ctx, send=(self._to_course(ctx, cmd.course_id, reserve),))
        refused = e.CommandRefused(command="transfer", status=state.status or "NONE", reason=why)
        return Decision(state, events=(Fact(refused, ctx.key),))

    # --- enrolling (and a promotion from the waitlist) -----------------------------------

    def _enrolling(
        self, state: EnrollmentState, place: Place, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        rid = place.rid(ctx.key)
        match message:
            case e.SeatHeld() if place.seat in ("requested", "waitlisted"):
                held = place.model_copy(update={"seat": "held", "credits": "requested"})
                hold = e.HoldCredits(
                    reservation_id=rid,
                    enrollment_id=ctx.key,
                    course_id=place.course_id,
                    credits=message.course_credits,
                )
                new = state.model_copy(
                    update={"status": "PENDING", "place": held, "position": None}
                )
                send = (self._to_student(ctx, state.student_id, hold),)
                if state.status == "WAITLISTED":  # promoted: the saga goes on
                    return self._move(new, ctx, send=send)
                return Decision(
                    new, send=send, set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout}
                )
            case e.Waitlisted() if place.seat == "requested":
                queued = place.model_copy(update={"seat": "waitlisted"})
                new = state.model_copy(
                    update={"status": "WAITLISTED", "place": queued, "position": message.position}
                )
                return self._rest(new, ctx)
            case e.WaitlistMoved() if place.seat == "waitlisted":
                if message.position == state.position:
                    return Decision(state)
                return self._rest(state.model_copy(update={"position": message.position}), ctx)
            case e.SeatRefused() if place.seat == "requested":
                refused = state.model_copy(
                    update={"place": place.model_copy(update={"seat": "done"})}
                )
                return self._fail(refused, "REJECTED", message.reason, ctx)
            case e.CreditsHeld() if place.credits == "requested":
                confirming = place.model_copy(
                    update={"seat": "confirming", "credits": "confirming"}
                )
                new = state.model_copy(update={"place": confirming})
                confirms = (
                    self._to_course(ctx, place.course_id, e.ConfirmSeat(reservation_id=rid)),
                    self._to_student(ctx, state.student_id, e.ConfirmCredits(reservation_id=rid)),
                )
                return Decision(new, send=confirms)
            case e.CreditsRefused() if place.credits == "requested":
                refused = state.model_copy(
                    update={"place": place.model_copy(update={"credits": "done"})}
                )
                return self._fail(refused, "REJECTED", message.reason, ctx)
            case e.SeatConfirmed() if place.seat == "confirming":
                return self._enrolled_if_done(
                    state, place.model_copy(update={"seat": "confirmed"}), ctx
                )
            case e.CreditsConfirmed() if place.credits == "confirming":
                confirmed = place.model_copy(update={"credits": "confirmed"})
                return self._enrolled_if_done(state, confirmed, ctx)
            case e.SeatReleased(reason="expired") | e.SeatConfirmRefused() if place.seat in (
                "held",
                "confirming",
            ):
                gone = state.model_copy(update={"place": place.model_copy(update={"seat": "done"})})
                return self._fail(gone, "REJECTED", "seat hold expired", ctx)
            case e.CreditsConfirmRefused() if place.credits == "confirming":
                gone = state.model_copy(
                    update={"place": place.model_copy(update={"credits": "done"})}
                )
                return self._fail(gone, "REJECTED", f"credits: {message.reason}", ctx)
        return Decision(state)  # a duplicate, or a reply this step no longer waits for

    def _enrolled_if_done(
        self, state: EnrollmentState, place: Place, ctx: Context
    ) -> Decision[EnrollmentState]:
        new = state.model_copy(update={"place": place})
        if place.seat == "confirmed" and place.credits == "confirmed":
            return self._rest(new.model_copy(update={"status": "ENROLLED", "reason": None}), ctx)
        return Decision(new)

    # --- transferring ---------------------------------------------------------------------

    def _transferring(
        self, state: EnrollmentState, t: Place, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        rid = t.rid(ctx.key)
        assert state.place is not None
        match message:
            case e.SeatHeld() if t.seat == "requested":
                held = t.model_copy(update={"seat": "held", "credits": "requested"})
                hold = e.HoldCredits(
                    reservation_id=rid,
                    enrollment_id=ctx.key,
                    course_id=t.course_id,
                    credits=message.course_credits,
                    replaces=state.place.rid(ctx.key),
                )
                new = state.model_copy(update={"transfer": held})
                return Decision(new, send=(self._to_student(ctx, state.student_id, hold),))
            case e.SeatRefused() | e.Waitlisted() if t.seat == "requested":
                # A waitlist answer cannot come (a transfer asks for none); leave it anyway.
                seat = "waitlisted" if isinstance(message, e.Waitlisted) else "done"
                why = "course full" if isinstance(message, e.Waitlisted) else message.reason
                return self._refuse_transfer(state, t.model_copy(update={"seat": seat}), why, ctx)
            case e.CreditsHeld() if t.credits == "requested":
                confirming = t.model_copy(update={"seat": "confirming", "credits": "held"})
                new = state.model_copy(update={"transfer": confirming})
                confirm = e.ConfirmSeat(reservation_id=rid)
                return Decision(new, send=(self._to_course(ctx, t.course_id, confirm),))
            case e.CreditsRefused() if t.credits == "requested":
                refused = t.model_copy(update={"credits": "done"})
                return self._refuse_transfer(state, refused, message.reason, ctx)
            case e.SeatReleased(reason="expired") | e.SeatConfirmRefused() if t.seat in (
                "held",
                "confirming",
            ):
                gone = t.model_copy(update={"seat": "done"})
                return self._refuse_transfer(state, gone, "seat hold expired", ctx)
            case e.SeatConfirmed() if t.seat == "confirming":
                # The point of no return: the new seat is the student's; now let the old go.
                committed = t.model_copy(update={"seat": "confirmed", "credits": "confirming"})
                old = state.place.model_copy(update={"seat": "releasing"})
                new = state.model_copy(update={"transfer": committed, "place": old})
                return self._commit(new, committed, ctx)
            case e.CreditsConfirmed() | e.CreditsConfirmRefused() if t.credits == "confirming":
                # A refused confirm cannot come (nothing else releases the hold); the seat
                # is confirmed either way, so the transfer goes on.
                return self._finish_if_done(
                    state, t.model_copy(update={"credits": "confirmed"}), ctx
                )
        return Decision(state)

    def _old_seat(
        self, state: EnrollmentState, t: Place, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        """A reply about the seat a committed transfer is giving back."""
        assert state.place is not None
        if isinstance(message, e.SeatReleased) and state.place.seat == "releasing":
            new = state.model_copy(
                update={"place": state.place.model_copy(update={"seat": "done"})}
            )
            return self._finish_if_done(new, t, ctx)
        return Decision(state)

    def _commit(self, state: EnrollmentState, t: Place, ctx: Context) -> Decision[EnrollmentState]:
        """Send what a committed transfer still waits for (again, after a timeout)."""
        assert state.place is not None
        send = []
        if state.place.seat == "releasing":
            release = e.ReleaseSeat(reservation_id=state.place.rid(ctx.key))
            send.append(self._to_course(ctx, state.place.course_id, release))
        if t.credits == "confirming":
            confirm = e.ConfirmCredits(reservation_id=t.rid(ctx.key))
            send.append(self._to_student(ctx, state.student_id, confirm))
        return Decision(
            state.model_copy(update={"transfer": t}),
            send=tuple(send),
            set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout},
        )

    def _finish_if_done(
        self, state: EnrollmentState, t: Place, ctx: Context
    ) -> Decision[EnrollmentState]:
        assert state.place is not None
        if state.place.seat != "done" or t.credits != "confirmed":
            return Decision(state.model_copy(update={"transfer": t}))
        moved = state.model_copy(
            update={"place": t, "transfer": None, "status": "ENROLLED", "reason": None}
        )
        return self._rest(moved, ctx)

    def _refuse_transfer(
        self, state: EnrollmentState, t: Place, why: str, ctx: Context
    ) -> Decision[EnrollmentState]:
        """Give back what the transfer took; the old seat was never touched."""
        back = state.model_copy(
            update={
                "status": "ENROLLED",
                "transfer": None,
                "reason": f"transfer to {t.course_id} refused: {why}",
            }
        )
        return self._rest(back, ctx, send=self._releases(ctx, state.student_id, t))

    # --- building blocks ----------------------------------------------------------------

    def _fail(
        self, state: EnrollmentState, status: e.EnrollmentStatus, reason: str, ctx: Context
    ) -> Decision[EnrollmentState]:
        """Release everything that may be held or confirmed, in every course, and end."""
        send = tuple(
            command
            for place in (state.place, state.transfer)
            if place is not None
            for command in self._releases(ctx, state.student_id, place)
        )
        ended = state.model_copy(update={"reason": reason, "transfer": None, "position": None})
        return self._end(ended, status, ctx, send=send)

    def _releases(self, ctx: Context, student_id: str, place: Place) -> tuple[Command, ...]:
        rid = place.rid(ctx.key)
        send = []
        if place.seat in _TAKEN or place.seat == "releasing":
            send.append(self._to_course(ctx, place.course_id, e.ReleaseSeat(reservation_id=rid)))
        if place.credits in _TAKEN:
            send.append(self._to_student(ctx, student_id, e.ReleaseCredits(reservation_id=rid)))
        return tuple(send)

    def _move(
        self, state: EnrollmentState, ctx: Context, send: tuple[Command, ...] = ()
    ) -> Decision[EnrollmentState]:
        """A new status whose step awaits a reply (within the step timeout)."""
        return Decision(
            state,
            send=send,
            events=(self._status(state, ctx),),
            set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout},
        )

    def _rest(
        self, state: EnrollmentState, ctx: Context, send: tuple[Command, ...] = ()
    ) -> Decision[EnrollmentState]:
        """A settled status: nothing is awaited, so no step deadline runs."""
        return Decision(
            state,
            send=send,
            events=(self._status(state, ctx),),
            clear_deadlines=frozenset({STEP_DEADLINE}),
        )

    def _end(
        self,
        state: EnrollmentState,
        status: e.EnrollmentStatus,
        ctx: Context,
        send: tuple[Command, ...] = (),
    ) -> Decision[EnrollmentState]:
        return self._rest(state.model_copy(update={"status": status}), ctx, send=send)

    def _status(self, state: EnrollmentState, ctx: Context) -> Fact:
        # Name the saga explicitly: a deadline that fires has no incoming message to copy it from.
        assert state.status is not None
        changed = e.EnrollmentStatusChanged(
            status=state.status,
            course_id=state.course_id,
            reason=state.reason,
            waitlist_position=state.position if state.status == "WAITLISTED" else None,
            transfer_to=state.transfer.course_id if state.transfer else None,
        )
        return Fact(changed, ctx.key)

    def _to_course(self, ctx: Context, course_id: str, message: Message) -> Command:
        return Command(self.courses, course_id, message, saga_id=ctx.key, reply_to=self.name)

    def _to_student(self, ctx: Context, student_id: str, message: Message) -> Command:
        return Command(self.students, student_id, message, saga_id=ctx.key, reply_to=self.name)
