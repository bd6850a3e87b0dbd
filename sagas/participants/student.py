"""The student participant: may this student take this course, and their credits.

Keyed by student id, so every credit hold of one student is decided in order: two
enrollments cannot both take the last credits. The credits are
:class:`~sagas.machinery.reservations.Reservations` of ``max_credits``: a hold per
reservation id (an enrollment's seat request), confirmed as a commitment kept open for as
long as the student stays enrolled, released as cancelled or refunded, idempotent by that
id. A transfer's hold *replaces* the enrollment's current reservation: only the difference
is held, and confirming it gives the old one back and commits the new one's credits.
Invariant after every decision: ``credits_used + credits_held <= max_credits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, model_validator

from sagas.contracts import enrollment as e
from sagas.machinery.frozen import checked_copy
from sagas.machinery.history import History
from sagas.machinery.process import Context, Decision
from sagas.machinery.reservations import DEFAULT_RETENTION, Closed, Reservations, Retention
from sagas.machinery.step import reply
from sagas.messages import Message
from sagas.participants.student_records import Credits, Finished, closed_from_words, from_credits

__all__ = ["Credits", "Finished", "StudentCredits", "StudentState"]


def what(closed: Closed[int]) -> str:
    """What became of a finished reservation, in the words the replies use."""
    match closed.outcome:
        case "rejected":
            return f"refused: {closed.note}"
        case "tombstone":
            return "released before it was held"
    return closed.note or f"released ({closed.outcome})"


class StudentState(Reservations[int]):
    """``on_hand`` is ``max_credits``; ``committed`` the credits of each enrollment."""

    exists: bool = False
    name: str = ""
    on_hand: int = 0
    courses: dict[str, Credits] = {}
    """What each open reservation (held or committed) is for."""
    closed: History[Annotated[Closed[int], BeforeValidator(closed_from_words)]] = Field(
        default_factory=History
    )

    @model_validator(mode="before")
    @classmethod
    def _stored_before(cls, data: Any) -> Any:
        return from_credits(data)

    @property
    def max_credits(self) -> int:
        return self.on_hand

    @property
    def enrolled(self) -> dict[str, Credits]:
        """The student's enrollments, in the order confirmed."""
        return {rid: self.courses[rid] for rid in self.committed}

    @property
    def credits_used(self) -> int:
        return self.committed_total

    @property
    def credits_held(self) -> int:
        return self.held


def totals(state: StudentState) -> dict[str, Any]:
    """The fields of every student fact: the student after it."""
    return {
        "name": state.name,
        "max_credits": state.max_credits,
        "credits_used": state.credits_used,
        "credits_held": state.credits_held,
        "enrollments": (
            *(_entry(c, "enrolled") for c in state.enrolled.values()),
            *(_entry(state.courses[r], "held") for r in state.holds),
        ),
    }


def _entry(credits: Credits, status: str) -> e.StudentEnrollment:
    return e.StudentEnrollment(
        enrollment_id=credits.enrollment_id,
        course_id=credits.course_id,
        credits=credits.credits,
        status=status,
    )


@dataclass(frozen=True)
class StudentCredits:
    """The student participant definition."""

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        e.SetStudent,
        e.HoldCredits,
        e.ConfirmCredits,
        e.ReleaseCredits,
    )
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        e.StudentSet,
        e.StudentChangeRefused,
        e.CreditsHeld,
        e.CreditsRefused,
        e.CreditsConfirmed,
        e.CreditsReleased,
    )
    """CreditsConfirmRefused is a reply only (and a CreditsRefused for an unknown student)."""
    KEY: ClassVar[str] = "the student id"
    name: str = "student"
    entity_type: str = "student"
    closed_window: int = 1000
    retention: timedelta = DEFAULT_RETENTION
    """Finished reservations are remembered this long (argued on ``Retention``)."""
    max_enrollments: int = e.MAX_STUDENT_ENROLLMENTS
    state_type: type[StudentState] = StudentState

    @property
    def keep(self) -> Retention:
        return Retention(self.retention, self.closed_window)

    def initial(self, key: str) -> StudentState:
        return StudentState()

    def decide(self, state: StudentState, message: Message, ctx: Context) -> Decision[StudentState]:
        match message:
            case e.SetStudent():
                return self._set(state, message, ctx)
            case e.HoldCredits():
                return self._hold(state, message, ctx)
            case e.ConfirmCredits():
                return self._confirm(state, message.reservation_id, ctx)
            case e.ReleaseCredits():
                return self._release(state, message.reservation_id, ctx)
        return Decision(state)

    def on_deadline(self, state: StudentState, name: str, ctx: Context) -> Decision[StudentState]:
        return Decision(state)  # credit holds end with their saga (its step timeout)

    def _set(self, state: StudentState, cmd: e.SetStudent, ctx: Context) -> Decision[StudentState]:
        restocked = state.restock(cmd.max_credits)
        if restocked is None:
            taken = state.credits_used + state.credits_held
            refused = e.StudentChangeRefused(
                **totals(state),
                requested_max_credits=cmd.max_credits,
                reason=f"{taken} credits are taken; max_credits cannot go below that",
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        new = checked_copy(restocked, {"exists": True, "name": cmd.name})
        fact = e.StudentSet(**totals(new))
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _hold(
        self, state: StudentState, cmd: e.HoldCredits, ctx: Context
    ) -> Decision[StudentState]:
        rid = cmd.reservation_id
        if state.knows(rid):
            return Decision(state, send=reply(ctx, _status_of(state, rid)))
        if not state.exists:
            # No student, no stream of theirs: a reply only.
            unknown = e.CreditsRefused(
                **totals(state), reservation_id=rid, reason=f"unknown student {ctx.key}"
            )
            return Decision(state, send=reply(ctx, unknown))
        replaced = state.committed.get(cmd.replaces or "", 0)
        needed, taken = max(0, cmd.credits - replaced), state.credits_used + state.credits_held
        if any(
            r != cmd.replaces and c.course_id == cmd.course_id for r, c in state.courses.items()
        ):
            rule = f"{ctx.key} is already enrolled in {cmd.course_id}"
            new, outcome = state.refuse(rid, needed, ctx.now, self.keep, note=rule)
        elif cmd.replaces is None and len(state.courses) >= self.max_enrollments:
            rule = f"{ctx.key} has {self.max_enrollments} enrollments already"
            new, outcome = state.refuse(rid, needed, ctx.now, self.keep, note=rule)
        else:
            over = f"over max_credits: {taken} taken + {needed} for {cmd.course_id} > "
            short = f"{over}{state.max_credits}"
            new, outcome = state.hold(rid, needed, ctx.now, self.keep, short=short)
        if outcome.kind != "held":
            refused = e.CreditsRefused(**totals(new), reservation_id=rid, reason=outcome.note)
            return Decision(new, send=reply(ctx, refused), events=(refused,))
        credits = Credits(
            enrollment_id=cmd.enrollment_id,
            course_id=cmd.course_id,
            credits=cmd.credits,
            replaces=cmd.replaces,
        )
        new = checked_copy(new, {"courses": {**new.courses, rid: credits}})
        fact = e.CreditsHeld(
            **totals(new), reservation_id=rid, course_id=cmd.course_id, held=needed
        )
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _confirm(self, state: StudentState, rid: str, ctx: Context) -> Decision[StudentState]:
        if rid not in state.holds:
            if rid in state.committed:  # a repeat
                return Decision(state, send=reply(ctx, _status_of(state, rid)))
            refused = e.CreditsConfirmRefused(
                **totals(state), reservation_id=rid, reason=_what(state, rid)
            )
            return Decision(state, send=reply(ctx, refused))
        credits, new = state.courses[rid], state
        courses = {**state.courses, rid: checked_copy(credits, {"replaces": None})}
        if credits.replaces is not None and credits.replaces in state.committed:
            # The old reservation's credits come back first: the new ones may be fewer.
            new, _ = new.release(credits.replaces, ctx.now, self.keep, "replaced by a transfer")
            del courses[credits.replaces]
        # At most what is held and free: had the replaced enrollment been released meanwhile
        # (no saga flow does), its credits must not take the student past max_credits.
        amount = min(credits.credits, new.holds[rid].amount + new.available)
        new, _ = new.commit(rid, ctx.now, self.keep, keep_open=True, amount=amount)
        new = checked_copy(new, {"courses": courses})
        fact = e.CreditsConfirmed(**totals(new), reservation_id=rid, course_id=credits.course_id)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _release(self, state: StudentState, rid: str, ctx: Context) -> Decision[StudentState]:
        new, released = state.release(rid, ctx.now, self.keep)
        if released.repeat or released.kind not in ("cancelled", "refunded"):
            # Already given back, or a release before its hold: a tombstone refuses it.
            return Decision(new)
        credits = state.courses[rid]
        courses = {r: c for r, c in new.courses.items() if r != rid}
        new = checked_copy(new, {"courses": courses})
        fact = e.CreditsReleased(
            **totals(new),
            reservation_id=rid,
            course_id=credits.course_id,
            reason="cancelled" if released.kind == "cancelled" else "refunded",
        )
        return Decision(new, send=reply(ctx, fact), events=(fact,))


def _status_of(state: StudentState, rid: str) -> Message:
    """The fact that answers a repeated command about ``rid``."""
    if (hold := state.holds.get(rid)) is not None:
        course = state.courses[rid].course_id
        return e.CreditsHeld(
            **totals(state), reservation_id=rid, course_id=course, held=hold.amount
        )
    if rid in state.committed:
        course = state.courses[rid].course_id
        return e.CreditsConfirmed(**totals(state), reservation_id=rid, course_id=course)
    return e.CreditsRefused(**totals(state), reservation_id=rid, reason=_what(state, rid))


def _what(state: StudentState, rid: str) -> str:
    closed = state.closed.get(rid)
    return "unknown reservation" if closed is None else what(closed)
