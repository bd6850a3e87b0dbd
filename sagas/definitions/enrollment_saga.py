"""The enrollment saga: a student's seat in a course, from request to drop, via transfers.

Enroll: hold a seat (or join the waitlist) -> hold the student's credits -> confirm both ->
``ENROLLED``. A full course answers ``Waitlisted``: the saga rests in ``WAITLISTED`` until
the course promotes it (a ``SeatHeld`` that arrives later), then goes on the same way.

Transfer (from ``ENROLLED``): hold a seat in the new course (never a waitlist) -> hold the
credits difference -> confirm the new seat, the pivot -> release the old seat and confirm
the credits -> ``ENROLLED`` in the new course. A failure before the pivot gives back only
what the transfer took, and the enrollment stays ``ENROLLED`` in the old course with the
reason; past it a timeout asks again. So the student holds a seat in one of the two courses
at every moment, and in exactly one once the saga settles.

Drop (from any status but a final one): give back every seat and credit that may be held,
in both courses during a transfer, and end ``DROPPED``. ``ENROLLED`` and ``WAITLISTED`` are
settled, not final: nothing is awaited, yet a drop, a transfer or a promotion continues.
The bookkeeping (deadlines, routing, compensations) is the kit's: sagas/machinery/kit.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, get_args

from sagas.contracts import enrollment as e
from sagas.machinery.kit import Cause, Flow, Saga, SagaState, Step
from sagas.machinery.legs import Leg
from sagas.machinery.process import Context, Decision
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Message


class EnrollmentState(SagaState):
    student_id: str = ""
    seat: Leg | None = None
    """The enrollment's seat, at its course (the leg's key)."""
    credits: Leg | None = None
    new_seat: Leg | None = None
    """The seat a transfer is moving to, while ``TRANSFERRING``."""
    new_credits: Leg | None = None
    attempts: int = 0
    position: int | None = None

    @property
    def final(self) -> bool:
        return self.status in e.FINAL_STATUSES

    @property
    def course_id(self) -> str:
        return self.seat.key if self.seat else ""


def _place(enrollment_id: str, course_id: str, student_id: str, attempt: int) -> dict[str, Leg]:
    rid = e.reservation_id(enrollment_id, attempt)
    return {"seat": Leg(key=course_id, rid=rid), "credits": Leg(key=student_id, rid=rid)}


@dataclass(frozen=True)
class EnrollmentSaga(Saga[EnrollmentState]):
    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=e.EnrollmentStatusChanged,
        statuses=get_args(e.EnrollmentStatus),
        final=e.FINAL_STATUSES,
        settled=e.SETTLED_STATUSES,
        failed=e.FAILED_STATUSES,
        start=e.EnrollmentRequested,
    )
    COMMANDS: ClassVar[tuple[type[Message], ...]] = (e.Enroll, e.Drop, e.Transfer)
    PORTS = {"courses": e.SEATS, "students": e.CREDITS}
    LEGS = {"seat": "courses", "credits": "students", "new_seat": "courses",
            "new_credits": "students"}  # fmt: skip
    FLOWS = {
        "enroll": Flow(
            steps=(
                Step("PENDING", hold=("seat",)),
                Step("PENDING", hold=("credits",)),
                Step("PENDING", confirm=("seat", "credits")),
            ),
            done="ENROLLED",
            failed="REJECTED",
            waits=frozenset({"WAITLISTED"}),
        ),
        "transfer": Flow(
            steps=(
                Step("TRANSFERRING", hold=("new_seat",)),
                Step("TRANSFERRING", hold=("new_credits",)),
                Step("TRANSFERRING", confirm=("new_seat",)),
                Step("TRANSFERRING", release=("seat",), confirm=("new_credits",), forward=True),
            ),
            done="ENROLLED",
            failed="ENROLLED",
        ),
    }
    OTHER_FACTS = (e.CommandRefused,)
    KEY: ClassVar[str] = "the enrollment id, which is also the saga id"
    name: str = "enrollment-saga"
    entity_type: str = "enrollment"
    courses: str = "course"
    students: str = "student"
    step_timeout: timedelta = timedelta(seconds=30)
    seat_ttl: timedelta = timedelta(minutes=5)
    state_type: type[EnrollmentState] = EnrollmentState

    def command(
        self, state: EnrollmentState, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        match message:
            case e.Enroll() if state.status is None:
                legs = _place(ctx.key, message.course_id, message.student_id, 0)
                new = EnrollmentState(student_id=message.student_id, **legs)
                requested = e.EnrollmentRequested(student_id=message.student_id,
                    course_id=message.course_id, waitlist=message.waitlist)  # fmt: skip
                return self.begin(new, "enroll", ctx, message, start=requested)
            case e.Drop() if state.status is None:  # it overtook its enrollment, which is refused
                return self.settle(state.but(reason=message.reason), "DROPPED", ctx)
            case e.Drop() if not state.final:
                return self.abort(state, "DROPPED", message.reason, ctx)
            case e.Drop():
                why = f"enrollment is {state.status}"
            case e.Transfer() if state.status != "ENROLLED":
                why = f"enrollment is {state.status or 'unknown'}"
            case e.Transfer() if message.course_id == state.course_id:
                why = f"already enrolled in {message.course_id}"
            case e.Transfer():
                attempt = state.attempts + 1
                legs = _place(ctx.key, message.course_id, state.student_id, attempt)
                new = state.but(
                    new_seat=legs["seat"], new_credits=legs["credits"], attempts=attempt
                )
                return self.begin(new, "transfer", ctx, message)
            case _:
                return Decision(state)  # this enrollment id is taken: the first request wins
        command = "drop" if isinstance(message, e.Drop) else "transfer"
        refused = e.CommandRefused(command=command, status=state.status or "NONE", reason=why)
        return self.tell(state, refused, ctx)

    def hold(
        self, state: EnrollmentState, field: str, leg: Leg, ctx: Context, cause: Message | None
    ) -> Message:
        if isinstance(cause, e.SeatHeld):  # the seat is held: now the credits it costs
            seat, old = (
                (state.new_seat, state.seat) if field == "new_credits" else (state.seat, None)
            )
            return e.HoldCredits(reservation_id=leg.rid, enrollment_id=ctx.key,
                course_id=seat.key if seat else "", credits=cause.course_credits,
                replaces=old.rid if old else None)  # fmt: skip
        waitlist = isinstance(cause, e.Enroll) and cause.waitlist  # a transfer never waits
        return e.ReserveSeat(reservation_id=leg.rid, enrollment_id=ctx.key,
            student_id=state.student_id, waitlist=waitlist,
            ttl_seconds=self.seat_ttl.total_seconds())  # fmt: skip

    def other(
        self, state: EnrollmentState, field: str, leg: Leg, message: Message, ctx: Context
    ) -> Decision[EnrollmentState]:
        """A full course's answers: a place on its waitlist, and moving up it."""
        if isinstance(message, e.Waitlisted) and leg.status == "pending":
            waiting = state.but(**{field: leg.but(status="waitlisted")})
            if field == "new_seat":
                return self.fail(waiting, ctx, "course full")
            return self.settle(waiting.but(position=message.position), "WAITLISTED", ctx)
        if not isinstance(message, e.WaitlistMoved) or leg.status != "waitlisted":
            return Decision(state)
        if message.position == state.position:
            return Decision(state)
        return self.settle(state.but(position=message.position), "WAITLISTED", ctx)

    def on_answer(
        self, state: EnrollmentState, field: str, leg: Leg, message: Message
    ) -> EnrollmentState:
        return state.but(position=None) if isinstance(message, e.SeatHeld) else state

    def why(self, cause: Cause) -> str:
        reason = getattr(cause.message, "reason", "")
        if cause.outcome == "refused":
            return str(reason)
        return f"credits: {reason}" if "credits" in cause.field else "seat hold expired"

    def failed(self, state: EnrollmentState, flow: Flow | None, reason: str) -> EnrollmentState:
        if flow is self.FLOWS["transfer"] and state.new_seat is not None:
            reason = f"transfer to {state.new_seat.key} refused: {reason}"
        return state.but(reason=reason, new_seat=None, new_credits=None, position=None)

    def finished(self, state: EnrollmentState, flow: Flow) -> EnrollmentState:
        if state.new_seat is not None:  # a transfer: the new seat is the enrollment's now
            state = state.but(seat=state.new_seat, credits=state.new_credits, new_seat=None,
                              new_credits=None)  # fmt: skip
        return state.but(reason=None)

    def status_event(self, state: EnrollmentState) -> Message:
        assert state.status is not None
        return e.EnrollmentStatusChanged(
            status=state.status,
            course_id=state.course_id,
            reason=state.reason,
            waitlist_position=state.position if state.status == "WAITLISTED" else None,
            transfer_to=state.new_seat.key if state.new_seat else None,
        )
