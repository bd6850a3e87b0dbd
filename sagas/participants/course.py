"""The course participant: a capacity ledger of seats, plus a FIFO waitlist that promotes
itself.

Keyed by course id, so every seat request, confirm, release, expiry and capacity change of
one course is decided in order against one state: two students racing for the last seat
cannot both win, and a freed seat goes to the head of the waitlist *in the decision that
frees it*, before any newcomer's request is even read.

Seats are a :class:`~sagas.participants.ledger.CapacityLedger` (holds with a TTL, confirm,
cancel, refund, idempotent by reservation id); this module adds what a course knows on top:
its title and credits, who holds each seat, and the queue. A confirmed seat leaves the
ledger's ``on_hand`` (a sale), so ``capacity = on_hand + enrolled``.
Invariants after every decision: ``enrolled + held <= capacity``, and a non-empty waitlist
means no seat is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from sagas.contracts import enrollment as e
from sagas.contracts import ledger as lc
from sagas.machinery.process import Command, Context, Decision, Fact, merge
from sagas.machinery.step import reply
from sagas.messages import Message
from sagas.participants.ledger import CapacityLedger, Closed, LedgerState
from sagas.participants.retention import DEFAULT_RETENTION, epoch_seconds


class Queued(BaseModel):
    """A waitlisted seat request, with what it takes to answer its saga when promoted."""

    model_config = ConfigDict(frozen=True)
    reservation_id: str
    enrollment_id: str
    student_id: str
    ttl_seconds: float
    saga_id: str | None = None
    reply_to: str | None = None


class CourseState(BaseModel):
    model_config = ConfigDict(frozen=True)
    exists: bool = False
    title: str = ""
    credits: int = 0
    seats: LedgerState = LedgerState()
    holders: dict[str, str] = {}
    """Reservation id -> student id of every held seat (the ledger's holds)."""
    enrolled: dict[str, str] = {}
    """Reservation id -> student id of every confirmed seat, in the order confirmed."""
    waitlist: tuple[Queued, ...] = ()

    @property
    def capacity(self) -> int:
        return self.seats.on_hand + len(self.enrolled)

    @property
    def held(self) -> int:
        return self.seats.reserved

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


def _seats_of(state: CourseState, rid: str, ctx: Context) -> LedgerState:
    """The ledger's state to decide a command about ``rid`` on. A confirmed seat is the
    roster's (``enrolled``), for as long as the student keeps it; the ledger remembers the
    sale only for its retention, so when a seat is released (a drop, a transfer) months
    later the sale is put back for the ledger to refund it."""
    seats = state.seats
    if rid not in state.enrolled or rid in seats.closed:
        return seats
    sale = Closed("confirmed", 1, epoch_seconds(ctx.now))
    return seats.model_copy(update={"closed": seats.closed.put(rid, sale)})


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
    """Finished seat reservations are remembered this long (the ledger's ``retention``)."""
    max_waitlist: int = e.MAX_SEATS
    state_type: type[CourseState] = CourseState

    @property
    def ledger(self) -> CapacityLedger:
        return CapacityLedger(self.name, self.entity_type, self.closed_window, self.retention)

    def initial(self, key: str) -> CourseState:
        return CourseState()

    def decide(self, state: CourseState, message: Message, ctx: Context) -> Decision[CourseState]:
        # Holds past their TTL go first (exact TTLs even when a tick is late), and their
        # seats to the waitlist, before the message is decided.
        expired = self.on_deadline(state, "expire", ctx)
        return merge(expired, self._decide(expired.state, message, ctx))

    def on_deadline(self, state: CourseState, name: str, ctx: Context) -> Decision[CourseState]:
        expired = self._lift(state, self.ledger.on_deadline(state.seats, name, ctx), ctx)
        return merge(expired, self._promote(expired.state, ctx))

    def _decide(self, state: CourseState, message: Message, ctx: Context) -> Decision[CourseState]:
        match message:
            case e.SetCourse():
                return self._set(state, message, ctx)
            case e.ReserveSeat():
                return self._reserve(state, message, ctx)
            case e.ConfirmSeat():
                rid = message.reservation_id
                confirm = lc.Confirm(reservation_id=rid)
                seats = _seats_of(state, rid, ctx)
                return self._lift(state, self.ledger.decide(seats, confirm, ctx), ctx)
            case e.ReleaseSeat():
                return self._release(state, message.reservation_id, ctx)
        return Decision(state)

    # --- commands -----------------------------------------------------------------------

    def _set(self, state: CourseState, cmd: e.SetCourse, ctx: Context) -> Decision[CourseState]:
        taken = len(state.enrolled) + state.held
        if cmd.capacity < taken:
            refused = e.CourseChangeRefused(
                **roster(state),
                requested_capacity=cmd.capacity,
                reason=(
                    f"{taken} seats are taken ({len(state.enrolled)} enrolled, {state.held} "
                    "held); capacity cannot go below that"
                ),
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        seats = state.seats.model_copy(update={"on_hand": cmd.capacity - len(state.enrolled)})
        new = state.model_copy(
            update={"exists": True, "title": cmd.title, "credits": cmd.credits, "seats": seats}
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
        seats = _seats_of(state, rid, ctx)
        if rid in seats.holds or rid in seats.closed:  # a repeat: answer again
            again = lc.Reserve(reservation_id=rid, quantity=1, ttl_seconds=cmd.ttl_seconds)
            return self._lift(state, self.ledger.decide(seats, again, ctx), ctx)
        if not state.exists:
            # Not a fact about any course (no such course has a stream): a reply only.
            unknown = e.SeatRefused(
                **roster(state), reservation_id=rid, reason=f"unknown course {ctx.key}"
            )
            return Decision(state, send=reply(ctx, unknown))
        if (already := state.where_is(cmd.student_id)) is not None:
            return self._refuse(state, rid, f"{cmd.student_id} {already} {ctx.key}", ctx)
        if state.seats.available >= 1 and not state.waitlist:
            hold = lc.Reserve(reservation_id=rid, quantity=1, ttl_seconds=cmd.ttl_seconds)
            held = self.ledger.decide(state.seats, hold, ctx)
            return self._lift(state, held, ctx, holder=(rid, cmd.student_id))
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
        new = state.model_copy(update={"waitlist": (*state.waitlist, queued)})
        fact = self._waitlisted(new, queued)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _release(self, state: CourseState, rid: str, ctx: Context) -> Decision[CourseState]:
        if (position := state.position(rid)) is not None:
            queued = state.waitlist[position - 1]
            rest = tuple(q for q in state.waitlist if q.reservation_id != rid)
            # The ledger leaves a tombstone for a reservation it never held: a late
            # request with this id is answered as cancelled, never queued again.
            seats = self.ledger.decide(state.seats, lc.Cancel(reservation_id=rid), ctx).state
            new = state.model_copy(update={"waitlist": rest, "seats": seats})
            fact = e.SeatReleased(
                **roster(new), reservation_id=rid, student_id=queued.student_id, reason="dequeued"
            )
            left = Decision(new, send=reply(ctx, fact), events=(fact,))
            return merge(left, Decision(new, send=_moved(state.waitlist, rest)))
        cancel = lc.Cancel(reservation_id=rid)
        released = self._lift(
            state, self.ledger.decide(_seats_of(state, rid, ctx), cancel, ctx), ctx
        )
        return merge(released, self._promote(released.state, ctx))

    # --- the waitlist -------------------------------------------------------------------

    def _promote(self, state: CourseState, ctx: Context) -> Decision[CourseState]:
        """Hold a seat for the head of the waitlist while seats are free, answering each
        promoted request's saga as if its request had just been granted."""
        before = state.waitlist
        decision = Decision(state)
        while state.waitlist and state.seats.available >= 1:
            head, rest = state.waitlist[0], state.waitlist[1:]
            state = state.model_copy(update={"waitlist": rest})
            for_head = Context(
                key=ctx.key,
                now=ctx.now,
                cause_id=ctx.child_id(f"promote/{head.reservation_id}"),
                saga_id=head.saga_id,
                reply_to=head.reply_to,
            )
            hold = lc.Reserve(
                reservation_id=head.reservation_id, quantity=1, ttl_seconds=head.ttl_seconds
            )
            held = self.ledger.decide(state.seats, hold, for_head)
            promoted = self._lift(
                state, held, for_head, holder=(head.reservation_id, head.student_id), promoted=True
            )
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

    # --- from the ledger's facts to the course's --------------------------------------

    def _lift(
        self,
        state: CourseState,
        decision: Decision[LedgerState],
        ctx: Context,
        holder: tuple[str, str] | None = None,
        promoted: bool = False,
    ) -> Decision[CourseState]:
        """The ledger's decision as the course's: the seats it left, who holds and who has
        each seat after it, and its facts (events and replies alike) as course facts that
        carry the roster. ``holder`` names the student of a seat being requested."""
        who = {**state.holders, **state.enrolled, **dict([holder] if holder else [])}
        holders, enrolled = dict(state.holders), dict(state.enrolled)
        for event in decision.events:
            fact = event.message if isinstance(event, Fact) else event
            match fact:
                case lc.Reserved(reservation_id=rid):
                    holders[rid] = who[rid]
                case lc.Confirmed(reservation_id=rid) if rid in holders:
                    enrolled[rid] = holders.pop(rid)
                case lc.Released(reservation_id=rid):
                    holders.pop(rid, None)
                    enrolled.pop(rid, None)
        new = state.model_copy(
            update={"seats": decision.state, "holders": holders, "enrolled": enrolled}
        )
        course = roster(new)
        lifted: dict[int, Message] = {}

        def lift(fact: Message) -> Message:
            if id(fact) not in lifted:
                lifted[id(fact)] = _course_fact(fact, course, who, new.credits, promoted)
            return lifted[id(fact)]

        events = tuple(
            Fact(lift(ev.message), ev.saga_id)
            if isinstance(ev, Fact)
            else Fact(lift(ev), ctx.saga_id)
            for ev in decision.events
        )
        send = tuple(
            Command(c.channel, c.key, lift(c.message), saga_id=c.saga_id, reply_to=c.reply_to)
            for c in decision.send
        )
        return Decision(new, send, events, decision.set_deadlines, decision.clear_deadlines)


def _course_fact(
    fact: Message, course: dict[str, Any], who: dict[str, str], credits: int, promoted: bool
) -> Message:
    match fact:
        case lc.Reserved(reservation_id=rid, expires_at=expires_at):
            return e.SeatHeld(
                **course,
                reservation_id=rid,
                student_id=who[rid],
                course_credits=credits,
                expires_at=expires_at,
                promoted=promoted,
            )
        case lc.Confirmed(reservation_id=rid):
            return e.SeatConfirmed(**course, reservation_id=rid, student_id=who.get(rid, ""))
        case lc.Released(reservation_id=rid, reason=reason):
            return e.SeatReleased(
                **course, reservation_id=rid, student_id=who.get(rid, ""), reason=reason
            )
        case lc.ConfirmRefused(reservation_id=rid, reason=reason):
            return e.SeatConfirmRefused(**course, reservation_id=rid, reason=reason)
        case lc.ReservationRejected(reservation_id=rid, reason=reason):
            return e.SeatRefused(**course, reservation_id=rid, reason=reason)
    raise AssertionError(f"the course has no fact for the ledger's {fact.TYPE}")


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
