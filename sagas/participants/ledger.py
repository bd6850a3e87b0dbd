"""The capacity ledger participant: reserve / confirm / cancel with a TTL on every hold.

Keyed by the entity whose units it guards (a product's stock, a course's seats), so every
command for one entity is decided, in order, against a state that includes all earlier ones:
two orders racing for the last unit cannot both win, and no lock is needed.
Invariant: ``0 <= reserved <= on_hand`` after every decision.

The reservations themselves are :class:`~sagas.machinery.reservations.Reservations` (whole
units); this module maps the ledger's contract onto them and their outcomes onto its facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import Field, SerializerFunctionWrapHandler, field_serializer, field_validator

from sagas.contracts import ledger as c
from sagas.machinery.process import Command, Context, Decision, Fact, merge
from sagas.machinery.reservations import (
    DEFAULT_RETENTION,
    Closed,
    Hold,
    Outcome,
    Reservations,
    Retention,
)
from sagas.machinery.step import reply
from sagas.messages import Message

__all__ = ["CapacityLedger", "Closed", "LedgerState", "expiry_deadline"]


class LedgerState(Reservations[int]):
    on_hand: int = 0
    committed: dict[str, int] = Field(default_factory=dict, exclude=True)
    """Always empty: a sale is consumed (``on_hand`` falls), never kept open; not stored."""

    @property
    def reserved(self) -> int:
        return self.held

    # A hold's amount is stored as ``quantity``, as before the primitive: a record's bytes
    # (and so the size limits measured on them) and a rollback stay as they were.
    @field_serializer("holds", mode="wrap")
    def _stored_as_quantity(self, holds: Any, handler: SerializerFunctionWrapHandler) -> Any:
        return {k: _renamed(v, "amount", "quantity") for k, v in handler(holds).items()}

    @field_validator("holds", mode="before")
    @classmethod
    def _read_as_amount(cls, holds: Any) -> Any:
        if isinstance(holds, dict):
            return {k: _renamed(v, "quantity", "amount") for k, v in holds.items()}
        return holds

    @field_validator("closed", mode="before")
    @classmethod
    def _closed_as_objects(cls, closed: Any) -> Any:
        # Records stored before ages hold ``{"outcome": ..., "quantity": ...}`` objects.
        if isinstance(closed, dict):
            return {k: _renamed(v, "quantity", "amount") for k, v in closed.items()}
        return closed


def _renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict) and old in value:
        return {new if k == old else k: v for k, v in value.items()}
    return value


def expiry_deadline(reservation_id: str) -> str:
    """The deadline that expires a hold (its TTL), by its reservation id."""
    return f"expire:{reservation_id}"


@dataclass(frozen=True)
class CapacityLedger:
    """A ledger definition; one instance per kind of entity (``product``, ``course``)."""

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (c.SetCapacity, c.Reserve, c.Confirm, c.Cancel)
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        c.CapacitySet,
        c.CapacitySetRefused,
        c.Reserved,
        c.ReservationRejected,
        c.Confirmed,
        c.Released,
    )
    """ConfirmRefused is a reply only: refusing changes nothing about the entity."""
    KEY: ClassVar[str] = "the id of the entity whose units it guards (a product id)"
    name: str
    entity_type: str
    closed_window: int = 1000
    """Most finished reservations kept, whatever their age: bounds a hot key's history in
    memory (the window by age alone grows with the key's rate)."""
    retention: timedelta = DEFAULT_RETENTION
    """Finished reservations older than this are forgotten (argued on ``Retention``)."""
    state_type: type[LedgerState] = LedgerState

    @property
    def keep(self) -> Retention:
        return Retention(self.retention, self.closed_window)

    def initial(self, key: str) -> LedgerState:
        return LedgerState()

    def decide(self, state: LedgerState, message: Message, ctx: Context) -> Decision[LedgerState]:
        # Holds past their TTL are released before anything else is decided, so a TTL is
        # exact even when the expiry tick is late (a worker outage, a backlog).
        expired = self._expire(state, ctx)
        return merge(expired, self._decide(expired.state, message, ctx))

    def on_deadline(self, state: LedgerState, name: str, ctx: Context) -> Decision[LedgerState]:
        return self._expire(state, ctx)

    def _decide(self, state: LedgerState, message: Message, ctx: Context) -> Decision[LedgerState]:
        match message:
            case c.SetCapacity():
                return self._set(state, message, ctx)
            case c.Reserve():
                return self._reserve(state, message, ctx)
            case c.Confirm():
                return self._confirm(state, message, ctx)
            case c.Cancel():
                return self._cancel(state, message, ctx)
        return Decision(state)  # a message meant for someone else: nothing to do

    def _expire(self, state: LedgerState, ctx: Context) -> Decision[LedgerState]:
        """Release every hold whose TTL has passed and tell each saga that made one."""
        due = state.due(ctx.now)
        send: list[Command] = []
        events: list[Fact] = []
        for rid in due:
            state, lapsed = state.lapse(rid, ctx.now, self.keep)
            hold = lapsed.hold
            assert hold is not None  # a due hold lapses
            fact = c.Released(
                **_totals(state), reservation_id=rid, quantity=hold.amount, reason="expired"
            )
            events.append(Fact(fact, hold.saga_id))
            if hold.reply_to and hold.saga_id:
                send.append(Command(hold.reply_to, hold.saga_id, fact, saga_id=hold.saga_id))
        return Decision(
            state,
            send=tuple(send),
            events=tuple(events),
            clear_deadlines=frozenset(expiry_deadline(rid) for rid in due),
        )

    # --- commands -----------------------------------------------------------------------

    def _set(self, state: LedgerState, cmd: c.SetCapacity, ctx: Context) -> Decision[LedgerState]:
        new = state.restock(cmd.on_hand)
        if new is None:
            refused = c.CapacitySetRefused(
                **_totals(state),
                requested=cmd.on_hand,
                reason=f"{state.reserved} units are reserved; on_hand cannot go below that",
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        fact = c.CapacitySet(**_totals(new))
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _reserve(self, state: LedgerState, cmd: c.Reserve, ctx: Context) -> Decision[LedgerState]:
        ttl = timedelta(seconds=cmd.ttl_seconds)
        new, outcome = state.hold(
            cmd.reservation_id,
            cmd.quantity,
            ctx.now,
            self.keep,
            ttl=ttl,
            saga_id=ctx.saga_id,
            reply_to=ctx.reply_to,
        )
        if outcome.repeat:
            return Decision(state, send=reply(ctx, _answer(state, outcome)))
        if outcome.kind == "rejected":
            rejected = c.ReservationRejected(
                **_totals(state),
                reservation_id=cmd.reservation_id,
                quantity=cmd.quantity,
                reason=f"insufficient stock: requested {cmd.quantity}, available {state.available}",
            )
            return Decision(new, send=reply(ctx, rejected), events=(rejected,))
        fact = _answer(new, outcome)
        return Decision(
            new,
            send=reply(ctx, fact),
            events=(fact,),
            set_deadlines={expiry_deadline(cmd.reservation_id): ctx.now + ttl},
        )

    def _confirm(self, state: LedgerState, cmd: c.Confirm, ctx: Context) -> Decision[LedgerState]:
        new, outcome = state.commit(cmd.reservation_id, ctx.now, self.keep)
        fact = _answer(new, outcome)
        if outcome.repeat:
            return Decision(state, send=reply(ctx, fact))
        clear = frozenset({expiry_deadline(cmd.reservation_id)})
        return Decision(new, send=reply(ctx, fact), events=(fact,), clear_deadlines=clear)

    def _cancel(self, state: LedgerState, cmd: c.Cancel, ctx: Context) -> Decision[LedgerState]:
        rid = cmd.reservation_id
        new, outcome = state.release(rid, ctx.now, self.keep)
        match outcome:
            case Outcome(
                kind="cancelled" | "refunded" as reason, amount=int(quantity), repeat=False
            ):
                fact = c.Released(
                    **_totals(new), reservation_id=rid, quantity=quantity, reason=reason
                )
            case _:
                # A repeat (already given back: nothing to say), or a cancel before its
                # reserve, whose tombstone refuses the late reserve.
                return Decision(new)
        clear = frozenset({expiry_deadline(rid)})
        return Decision(new, send=reply(ctx, fact), events=(fact,), clear_deadlines=clear)


def _answer(state: LedgerState, outcome: Outcome[int]) -> Message:
    """The fact that states ``outcome`` (a repeat's: what was answered the first time)."""
    totals, rid = _totals(state), outcome.rid
    match outcome:
        case Outcome(kind="held", hold=Hold(amount=quantity, expires_at=expires_at)):
            expiry = "" if expires_at is None else expires_at.isoformat()
            return c.Reserved(**totals, reservation_id=rid, quantity=quantity, expires_at=expiry)
        case Outcome(kind="confirmed", amount=int(quantity)):
            return c.Confirmed(**totals, reservation_id=rid, quantity=quantity)
        case Outcome(kind="rejected", amount=int(quantity)):
            return c.ReservationRejected(
                **totals, reservation_id=rid, quantity=quantity, reason="insufficient stock"
            )
        case Outcome(kind="unknown"):
            return c.ConfirmRefused(**totals, reservation_id=rid, reason="unknown reservation")
    # Closed otherwise; a tombstone reads as the cancel it was (as stored before it had a name).
    kind = "cancelled" if outcome.kind == "tombstone" else outcome.kind
    return c.ConfirmRefused(**totals, reservation_id=rid, reason=f"reservation {kind}")


def _totals(state: LedgerState) -> dict[str, int]:
    return {"on_hand": state.on_hand, "reserved": state.reserved}
