"""The course participant: seats, plus a FIFO waitlist that promotes itself.

Keyed by course id, so every seat request, confirm, release, expiry and capacity change of
one course is decided in order against one state: two students racing for the last seat
cannot both win, and a freed seat goes to the head of the waitlist *in the decision that
frees it*, before any newcomer's request is even read.

Seats are :class:`~sagas.machinery.reservations.Reservations` of the capacity: a hold with
a TTL per seat request, a confirmed seat a commitment kept open for as long as the student
keeps it, released as cancelled or refunded, idempotent by reservation id. This module adds
what a course knows on top: its title and credits, who holds or has each seat, and the queue.
Invariants after every decision: ``enrolled + held <= capacity``, and a non-empty waitlist
means no seat is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sagas.contracts import enrollment as e
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Command, Context, Decision, Fact, merge
from sagas.machinery.reservations import DEFAULT_RETENTION, Hold, Outcome, Retention
from sagas.machinery.step import reply
from sagas.messages import Message
from sagas.participants.ledger import LedgerState, expiry_deadline


class Queued(BaseModel):
    """A waitlisted seat request, with what it takes to answer its saga when promoted."""

    model_config = ConfigDict(frozen=True)
    reservation_id: str
    enrollment_id: str
    student_id: str
    ttl_seconds: float
    saga_id: str | None = None
    reply_to: str | None = None


class Seats(LedgerState):
    """A course's seats: a ledger's units (stored as the ledger stores them) whose confirmed
    seats stay committed; ``on_hand`` is the capacity."""

    committed: dict[str, int] = Field(default_factory=dict)


class CourseState(BaseModel):
    model_config = ConfigDict(frozen=True)
    exists: bool = False
    title: str = ""
    credits: int = 0
    seats: Seats = Seats()
    holders: dict[str, str] = {}
    """Reservation id -> student id of every held seat (the seats' holds)."""
    enrolled: dict[str, str] = {}
    """Reservation id -> student id of every confirmed seat, in the order confirmed."""
    waitlist: tuple[Queued, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _seats_sold(cls, data: Any) -> Any:
        # Stored before the primitive, a confirmed seat left the seats' on_hand (a sale).
        seats = data.get("seats") if isinstance(data, dict) else None
        if not isinstance(seats, dict) or "committed" in seats:
            return data
        enrolled = data.get("enrolled", {})
        on_hand = seats.get("on_hand", 0) + len(enrolled)
        committed = dict.fromkeys(enrolled, 1)
        return {**data, "seats": {**seats, "on_hand": on_hand, "committed": committed}}

    @property
    def capacity(self) -> int:
        return self.seats.on_hand

    @property
    def held(self) -> int:
        return self.seats.held

    def position(self, rid: str) -> int | None:
        return next((i for i, q in enumerate(self.waitlist, 1) if q.reservation_id == rid), None)

    def where_is(self, student_id: str) -> str | None:
        """How ``student_id`` already takes part in this course, if at all."""
        if student_id in self.enrolled.values():
            return "is already enrolled in"
        if student_id in self.holders.values():
            return "already holds a seat in"
        if any(q.student_id == student_id for q in self.waitlist):
            return "is already waitlisted for"
        return None


def roster(state: CourseState) -> dict[str, Any]:
    """The fields of every course fact: the roster after it."""
    return {
        "title": state.title,
        "capacity": state.capacity,
        "credits": state.credits,
        "held": state.held,
        "enrolled": tuple(state.enrolled.values()),
        "waitlist": tuple(
            e.WaitlistEntry(enrollment_id=q.enrollment_id, student_id=q.student_id, position=i)
            for i, q in enumerate(state.waitlist, 1)
        ),
    }


@dataclass(frozen=True)
class CourseSeats:
    """The course participant definition."""

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        e.SetCourse,
        e.ReserveSeat,
        e.ConfirmSeat,
        e.ReleaseSeat,
    )
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        e.CourseSet,
        e.CourseChangeRefused,
        e.SeatHeld,
        e.Waitlisted,
        e.SeatRefused,
        e.SeatConfirmed,
        e.SeatReleased,
    )
    """SeatConfirmRefused and WaitlistMoved are replies only (and a SeatRefused for an
    unknown course: no such course has a stream)."""
    KEY: ClassVar[str] = "the course id"
    name: str = "course"
    entity_type: str = "course"
    closed_window: int = 1000
    retention: timedelta = DEFAULT_RETENTION
    """Finished seat reservations are remembered this long (argued on ``Retention``)."""
    max_waitlist: int = e.MAX_SEATS
    state_type: type[CourseState] = CourseState

    @property
    def keep(self) -> Retention:
        return Retention(self.retention, self.closed_window)

    def initial(self, key: str) -> CourseState:
        return CourseState()

    def decide(self, state: CourseState, message: Message, ctx: Context) -> Decision[CourseState]:
        # Holds past their TTL go first (exact TTLs even when a tick is late), and their
        # seats to the waitlist, before the message is decided.
        expired = self.on_deadline(state, "expire", ctx)
        return merge(expired, self._decide(expired.state, message, ctx))

    def on_deadline(self, state: CourseState, name: str, ctx: Context) -> Decision[CourseState]:
        seats, lapsed = state.seats.expire(ctx.now, self.keep)
        gone = {outcome.rid for outcome in lapsed}
        holders = {r: s for r, s in state.holders.items() if r not in gone}
        new = checked_copy(state, {"seats": seats, "holders": holders})
        send: list[Command] = []
        events: list[Fact] = []
        for outcome in lapsed:
            hold = outcome.hold or Hold[int](amount=1)
            fact = e.SeatReleased(
                **roster(new),
                reservation_id=outcome.rid,
                student_id=state.holders.get(outcome.rid, ""),
                reason="expired",
            )
            events.append(Fact(fact, hold.saga_id))
            if hold.reply_to and hold.saga_id:
                send.append(Command(hold.reply_to, hold.saga_id, fact, saga_id=hold.saga_id))
        clear = frozenset(expiry_deadline(rid) for rid in gone)
        expired = Decision(new, tuple(send), tuple(events), clear_deadlines=clear)
        return merge(expired, self._promote(new, ctx))

    def _decide(self, state: CourseState, message: Message, ctx: Context) -> Decision[CourseState]:
        match message:
            case e.SetCourse():
                return self._set(state, message, ctx)
            case e.ReserveSeat():
                return self._reserve(state, message, ctx)
            case e.ConfirmSeat():
                return self._confirm(state, message.reservation_id, ctx)
            case e.ReleaseSeat():
                return self._release(state, message.reservation_id, ctx)
        return Decision(state)

    # --- commands -----------------------------------------------------------------------

    def _set(self, state: CourseState, cmd: e.SetCourse, ctx: Context) -> Decision[CourseState]:
        seats = state.seats.restock(cmd.capacity)
        if seats is None:
            taken = len(state.enrolled) + state.held
            refused = e.CourseChangeRefused(
                **roster(state),
                requested_capacity=cmd.capacity,
                reason=(
                    f"{taken} seats are taken ({len(state.enrolled)} enrolled, {state.held} "
                    "held); capacity cannot go below that"
                ),
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        new = checked_copy(
            state, {"exists": True, "title": cmd.title, "credits": cmd.credits, "seats": seats}
        )
        fact = e.CourseSet(**roster(new))
        # A capacity raise frees seats: the waitlist takes them in this same decision.
        return merge(Decision(new, send=reply(ctx, fact), events=(fact,)), self._promote(new, ctx))

    def _reserve(
        self, state: CourseState, cmd: e.ReserveSeat, ctx: Context
    ) -> Decision[CourseState]:
        rid = cmd.reservation_id
        if (position := state.position(rid)) is not None:
            queued = state.waitlist[position - 1]
            return Decision(state, send=reply(ctx, self._waitlisted(state, queued)))
        if state.seats.knows(rid):  # a repeat: answer again
            return Decision(state, send=reply(ctx, _answer(state, state.seats.status(rid))))
        if not state.exists:
            # Not a fact about any course (no such course has a stream): a reply only.
            unknown = e.SeatRefused(
                **roster(state), reservation_id=rid, reason=f"unknown course {ctx.key}"
            )
            return Decision(state, send=reply(ctx, unknown))
        if (already := state.where_is(cmd.student_id)) is not None:
            return self._refuse(state, rid, f"{cmd.student_id} {already} {ctx.key}", ctx)
        if state.seats.available >= 1 and not state.waitlist:
            return self._hold(state, rid, cmd.student_id, cmd.ttl_seconds, ctx)
        if not cmd.waitlist:
            return self._refuse(state, rid, "course full", ctx)
        if len(state.waitlist) >= self.max_waitlist:
            return self._refuse(state, rid, "course full and its waitlist too", ctx)
        queued = Queued(
            reservation_id=rid,
            enrollment_id=cmd.enrollment_id,
            student_id=cmd.student_id,
            ttl_seconds=cmd.ttl_seconds,
            saga_id=ctx.saga_id,
            reply_to=ctx.reply_to,
        )
        new = checked_copy(state, {"waitlist": (*state.waitlist, queued)})
        fact = self._waitlisted(new, queued)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _hold(
        self,
        state: CourseState,
        rid: str,
        student_id: str,
        ttl_seconds: float,
        ctx: Context,
        promoted: bool = False,
    ) -> Decision[CourseState]:
        """Hold a free seat for ``rid`` (a new request, or the waitlist's head)."""
        ttl = timedelta(seconds=ttl_seconds)
        seats, held = state.seats.hold(
            rid, 1, ctx.now, self.keep, ttl=ttl, saga_id=ctx.saga_id, reply_to=ctx.reply_to
        )
        holders = {**state.holders, rid: student_id}
        new = checked_copy(state, {"seats": seats, "holders": holders})
        fact = _answer(new, held, promoted)
        # The fact names ``ctx``'s saga: a promoted request's, not the message's.
        events = (Fact(fact, ctx.saga_id),)
        expiry = {expiry_deadline(rid): ctx.now + ttl}
        return Decision(new, send=reply(ctx, fact), events=events, set_deadlines=expiry)

    def _confirm(self, state: CourseState, rid: str, ctx: Context) -> Decision[CourseState]:
        seats, confirmed = state.seats.commit(rid, ctx.now, self.keep, keep_open=True)
        if confirmed.repeat:
            return Decision(state, send=reply(ctx, _answer(state, confirmed)))
        # Seats forget what is past the retention at a confirm too, as they did when a
        # confirmed seat closed as a sale: a late repeat is answered as it was then.
        seats = seats.forget(ctx.now, self.keep)
        holders = {r: s for r, s in state.holders.items() if r != rid}
        enrolled = {**state.enrolled, rid: state.holders[rid]}
        new = checked_copy(state, {"seats": seats, "holders": holders, "enrolled": enrolled})
        fact = e.SeatConfirmed(**roster(new), reservation_id=rid, student_id=enrolled[rid])
        clear = frozenset({expiry_deadline(rid)})
        return Decision(new, send=reply(ctx, fact), events=(fact,), clear_deadlines=clear)

    def _release(self, state: CourseState, rid: str, ctx: Context) -> Decision[CourseState]:
        seats, released = state.seats.release(rid, ctx.now, self.keep)
        if (position := state.position(rid)) is not None:
            queued = state.waitlist[position - 1]
            rest = tuple(q for q in state.waitlist if q.reservation_id != rid)
            # The seats keep a tombstone for a reservation they never held: a late request
            # with this id is answered as cancelled, never queued again.
            new = checked_copy(state, {"waitlist": rest, "seats": seats})
            fact = e.SeatReleased(
                **roster(new), reservation_id=rid, student_id=queued.student_id, reason="dequeued"
            )
            left = Decision(new, send=reply(ctx, fact), events=(fact,))
            return merge(left, Decision(new, send=_moved(state.waitlist, rest)))
        match released:
            case Outcome(kind="cancelled" | "refunded" as reason, repeat=False):
                student = {**state.holders, **state.enrolled}.get(rid, "")
                holders = {r: s for r, s in state.holders.items() if r != rid}
                enrolled = {r: s for r, s in state.enrolled.items() if r != rid}
                update = {"seats": seats, "holders": holders, "enrolled": enrolled}
                new = checked_copy(state, update)
                fact = e.SeatReleased(
                    **roster(new), reservation_id=rid, student_id=student, reason=reason
                )
                clear = frozenset({expiry_deadline(rid)})
                freed = Decision(new, send=reply(ctx, fact), events=(fact,), clear_deadlines=clear)
            case _:  # already given back, or a release before its request: a tombstone
                freed = Decision(checked_copy(state, {"seats": seats}))
        return merge(freed, self._promote(freed.state, ctx))

    # --- the waitlist -------------------------------------------------------------------

    def _promote(self, state: CourseState, ctx: Context) -> Decision[CourseState]:
        """Hold a seat for the head of the waitlist while seats are free, answering each
        promoted request's saga as if its request had just been granted."""
        before = state.waitlist
        decision = Decision(state)
        while state.waitlist and state.seats.available >= 1:
            head, rest = state.waitlist[0], state.waitlist[1:]
            state = checked_copy(state, {"waitlist": rest})
            for_head = Context(
                key=ctx.key,
                now=ctx.now,
                cause_id=ctx.child_id(f"promote/{head.reservation_id}"),
                saga_id=head.saga_id,
                reply_to=head.reply_to,
            )
            rid, student, ttl = head.reservation_id, head.student_id, head.ttl_seconds
            promoted = self._hold(state, rid, student, ttl, for_head, promoted=True)
            decision = merge(decision, promoted)
            state = promoted.state
        if state.waitlist == before:
            return decision
        return merge(decision, Decision(state, send=_moved(before, state.waitlist)))

    def _waitlisted(self, state: CourseState, queued: Queued) -> e.Waitlisted:
        return e.Waitlisted(
            **roster(state),
            reservation_id=queued.reservation_id,
            student_id=queued.student_id,
            position=state.position(queued.reservation_id) or 0,
        )

    def _refuse(
        self, state: CourseState, rid: str, reason: str, ctx: Context
    ) -> Decision[CourseState]:
        refused = e.SeatRefused(**roster(state), reservation_id=rid, reason=reason)
        return Decision(state, send=reply(ctx, refused), events=(refused,))


def _answer(state: CourseState, outcome: Outcome[int], promoted: bool = False) -> Message:
    """The course fact that states a seat's ``outcome`` (a repeat's: as answered first)."""
    course, rid = roster(state), outcome.rid
    match outcome:
        case Outcome(kind="held", hold=Hold(expires_at=expires_at)):
            return e.SeatHeld(
                **course,
                reservation_id=rid,
                student_id=state.holders[rid],
                course_credits=state.credits,
                expires_at="" if expires_at is None else expires_at.isoformat(),
                promoted=promoted,
            )
        case Outcome(kind="committed" | "confirmed"):
            return e.SeatConfirmed(
                **course, reservation_id=rid, student_id=state.enrolled.get(rid, "")
            )
        case Outcome(kind="rejected"):
            return e.SeatRefused(**course, reservation_id=rid, reason="insufficient stock")
        case Outcome(kind="unknown"):
            return e.SeatConfirmRefused(**course, reservation_id=rid, reason="unknown reservation")
    # Closed otherwise; a tombstone reads as the cancel it was stored as before it had a name.
    kind = "cancelled" if outcome.kind == "tombstone" else outcome.kind
    return e.SeatConfirmRefused(**course, reservation_id=rid, reason=f"reservation {kind}")


def _moved(before: tuple[Queued, ...], after: tuple[Queued, ...]) -> tuple[Command, ...]:
    """Tell every queued request whose position changed its new one."""
    old = {q.reservation_id: i for i, q in enumerate(before, 1)}
    return tuple(
        Command(
            q.reply_to,
            q.saga_id,
            e.WaitlistMoved(reservation_id=q.reservation_id, position=i),
            saga_id=q.saga_id,
        )
        for i, q in enumerate(after, 1)
        if old.get(q.reservation_id) != i and q.reply_to and q.saga_id
    )
