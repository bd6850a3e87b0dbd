"""The student participant: may this student take this course, and their credits.

Keyed by student id, so every credit hold of one student is decided in order: two
enrollments cannot both take the last credits. Credits are held per reservation id (an
enrollment's seat request) and confirmed or released like a ledger's units, idempotent by
that id; a transfer's hold *replaces* the enrollment's current reservation, so only the
difference is held and confirming it swaps the two.
Invariant after every decision: ``credits_used + credits_held <= max_credits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sagas.contracts import enrollment as e
from sagas.machinery.history import History
from sagas.machinery.process import Context, Decision
from sagas.machinery.step import reply
from sagas.messages import Message
from sagas.participants.retention import DEFAULT_RETENTION, epoch_seconds, remember


class Credits(BaseModel):
    model_config = ConfigDict(frozen=True)
    enrollment_id: str
    course_id: str
    credits: int
    replaces: str | None = None


class Finished(NamedTuple):
    """What became of a finished reservation, and when (whole seconds since the epoch; 0:
    stored before ages were kept). A JSON array, like the ledger's ``Closed``."""

    what: str
    at: int = 0


class StudentState(BaseModel):
    model_config = ConfigDict(frozen=True)
    exists: bool = False
    name: str = ""
    max_credits: int = 0
    holds: dict[str, Credits] = {}
    enrolled: dict[str, Credits] = {}
    closed: History[Finished] = Field(default_factory=History)
    """Recently finished reservations, oldest first (kept for the retention, at most
    ``closed_window``): id -> what became of it, to answer repeats."""

    @field_validator("closed", mode="before")
    @classmethod
    def _ageless(cls, closed: Any) -> Any:
        # Records stored before ages were kept hold the text alone.
        if isinstance(closed, dict):
            return {k: [v, 0] if isinstance(v, str) else v for k, v in closed.items()}
        return closed

    def holding(self, hold: Credits) -> int:
        """What a hold adds to the credits taken: a transfer only the difference."""
        replaced = self.enrolled.get(hold.replaces) if hold.replaces else None
        return max(0, hold.credits - (replaced.credits if replaced else 0))

    @property
    def credits_used(self) -> int:
        return sum(c.credits for c in self.enrolled.values())

    @property
    def credits_held(self) -> int:
        return sum(self.holding(h) for h in self.holds.values())


def totals(state: StudentState) -> dict[str, Any]:
    """The fields of every student fact: the student after it."""
    return {
        "name": state.name,
        "max_credits": state.max_credits,
        "credits_used": state.credits_used,
        "credits_held": state.credits_held,
        "enrollments": (
            *(_entry(c, "enrolled") for c in state.enrolled.values()),
            *(_entry(c, "held") for c in state.holds.values()),
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
    """Finished reservations are remembered this long (the ledger's ``_remember`` argues
    the default)."""
    max_enrollments: int = e.MAX_STUDENT_ENROLLMENTS
    state_type: type[StudentState] = StudentState

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
        taken = state.credits_used + state.credits_held
        if cmd.max_credits < taken:
            refused = e.StudentChangeRefused(
                **totals(state),
                requested_max_credits=cmd.max_credits,
                reason=f"{taken} credits are taken; max_credits cannot go below that",
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        new = state.model_copy(
            update={"exists": True, "name": cmd.name, "max_credits": cmd.max_credits}
        )
        fact = e.StudentSet(**totals(new))
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _hold(
        self, state: StudentState, cmd: e.HoldCredits, ctx: Context
    ) -> Decision[StudentState]:
        rid = cmd.reservation_id
        if rid in state.holds or rid in state.enrolled or rid in state.closed:
            return Decision(state, send=reply(ctx, self._status_of(state, rid)))
        if not state.exists:
            # No student, no stream of theirs: a reply only.
            unknown = e.CreditsRefused(
                **totals(state), reservation_id=rid, reason=f"unknown student {ctx.key}"
            )
            return Decision(state, send=reply(ctx, unknown))
        others = [
            c
            for r, c in (*state.enrolled.items(), *state.holds.items())
            if r != cmd.replaces and c.course_id == cmd.course_id
        ]
        hold = Credits(
            enrollment_id=cmd.enrollment_id,
            course_id=cmd.course_id,
            credits=cmd.credits,
            replaces=cmd.replaces,
        )
        taken, needed = state.credits_used + state.credits_held, state.holding(hold)
        if others:
            reason = f"{ctx.key} is already enrolled in {cmd.course_id}"
        elif (
            cmd.replaces is None and len(state.holds) + len(state.enrolled) >= self.max_enrollments
        ):
            reason = f"{ctx.key} has {self.max_enrollments} enrollments already"
        elif taken + needed > state.max_credits:
            reason = (
                f"over max_credits: {taken} taken + {needed} for {cmd.course_id} "
                f"> {state.max_credits}"
            )
        else:
            new = state.model_copy(update={"holds": {**state.holds, rid: hold}})
            held = e.CreditsHeld(
                **totals(new), reservation_id=rid, course_id=cmd.course_id, held=needed
            )
            return Decision(new, send=reply(ctx, held), events=(held,))
        new = self._remember(state, rid, f"refused: {reason}", ctx)
        refused = e.CreditsRefused(**totals(new), reservation_id=rid, reason=reason)
        return Decision(new, send=reply(ctx, refused), events=(refused,))

    def _confirm(self, state: StudentState, rid: str, ctx: Context) -> Decision[StudentState]:
        hold = state.holds.get(rid)
        if hold is None:
            if rid in state.enrolled:  # a repeat
                return Decision(state, send=reply(ctx, self._status_of(state, rid)))
            what = _what(state, rid)
            refused = e.CreditsConfirmRefused(**totals(state), reservation_id=rid, reason=what)
            return Decision(state, send=reply(ctx, refused))
        enrolled = {r: c for r, c in state.enrolled.items() if r != hold.replaces}
        enrolled[rid] = hold.model_copy(update={"replaces": None})
        holds = {r: c for r, c in state.holds.items() if r != rid}
        new = state.model_copy(update={"holds": holds, "enrolled": enrolled})
        if hold.replaces is not None and hold.replaces in state.enrolled:
            new = self._remember(new, hold.replaces, "replaced by a transfer", ctx)
        fact = e.CreditsConfirmed(**totals(new), reservation_id=rid, course_id=hold.course_id)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _release(self, state: StudentState, rid: str, ctx: Context) -> Decision[StudentState]:
        if rid in state.holds:
            credits, reason = state.holds[rid], "cancelled"
        elif rid in state.enrolled:
            credits, reason = state.enrolled[rid], "refunded"
        elif rid in state.closed:
            return Decision(state)  # already given back
        else:
            # A release before its hold: a tombstone, so a late hold is refused.
            return Decision(self._remember(state, rid, "released before it was held", ctx))
        new = state.model_copy(
            update={
                "holds": {r: c for r, c in state.holds.items() if r != rid},
                "enrolled": {r: c for r, c in state.enrolled.items() if r != rid},
            }
        )
        new = self._remember(new, rid, f"released ({reason})", ctx)
        fact = e.CreditsReleased(
            **totals(new),
            reservation_id=rid,
            course_id=credits.course_id,
            reason=reason,
        )
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    # --- helpers ------------------------------------------------------------------------

    def _remember(self, state: StudentState, rid: str, what: str, ctx: Context) -> StudentState:
        entries = remember(
            state.closed,
            rid,
            Finished(what, epoch_seconds(ctx.now)),
            lambda entry: entry.at,
            ctx.now,
            self.retention,
            self.closed_window,
        )
        return state.model_copy(update={"closed": entries})

    def _status_of(self, state: StudentState, rid: str) -> Message:
        """The fact that answers a repeated command about ``rid``."""
        if (hold := state.holds.get(rid)) is not None:
            return e.CreditsHeld(
                **totals(state),
                reservation_id=rid,
                course_id=hold.course_id,
                held=state.holding(hold),
            )
        if (enrolled := state.enrolled.get(rid)) is not None:
            return e.CreditsConfirmed(
                **totals(state), reservation_id=rid, course_id=enrolled.course_id
            )
        what = _what(state, rid)
        return e.CreditsRefused(**totals(state), reservation_id=rid, reason=what)


def _what(state: StudentState, rid: str) -> str:
    finished = state.closed.get(rid)
    return "unknown reservation" if finished is None else finished.what
