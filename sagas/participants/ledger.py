"""The capacity ledger participant: reserve / confirm / cancel with a TTL on every hold.

Keyed by the entity whose units it guards (a product's stock, a course's seats), so every
command for one entity is decided, in order, against a state that includes all earlier ones:
two orders racing for the last unit cannot both win, and no lock is needed.
Invariant: ``0 <= reserved <= on_hand`` after every decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sagas.contracts import ledger as c
from sagas.machinery.process import Command, Context, Decision, Fact, merge
from sagas.machinery.step import reply
from sagas.messages import Message

Outcome = Literal["confirmed", "rejected", "cancelled", "expired", "refunded"]


class Hold(BaseModel):
    model_config = ConfigDict(frozen=True)
    quantity: int
    expires_at: datetime
    saga_id: str | None = None
    reply_to: str | None = None


class Closed(BaseModel):
    model_config = ConfigDict(frozen=True)
    outcome: Outcome
    quantity: int


class LedgerState(BaseModel):
    model_config = ConfigDict(frozen=True)
    on_hand: int = 0
    holds: dict[str, Hold] = {}
    closed: dict[str, Closed] = {}
    """Recently finished reservations (bounded), to answer repeats and refund sales."""

    @property
    def reserved(self) -> int:
        return sum(h.quantity for h in self.holds.values())

    @property
    def available(self) -> int:
        return self.on_hand - self.reserved


def _expiry(reservation_id: str) -> str:
    return f"expire:{reservation_id}"


@dataclass(frozen=True)
class CapacityLedger:
    """A ledger definition; one instance per kind of entity (``product``, ``course``)."""

    name: str
    entity_type: str
    closed_window: int = 1000
    state_type: type[LedgerState] = LedgerState

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
        due = sorted(
            ((rid, hold) for rid, hold in state.holds.items() if hold.expires_at <= ctx.now),
            key=lambda item: item[1].expires_at,
        )
        send: list[Command] = []
        events: list[Fact] = []
        for rid, hold in due:
            state = self._close(state, rid, "expired", hold.quantity)
            fact = c.Released(
                **_totals(state), reservation_id=rid, quantity=hold.quantity, reason="expired"
            )
            events.append(Fact(fact, hold.saga_id))
            if hold.reply_to and hold.saga_id:
                send.append(Command(hold.reply_to, hold.saga_id, fact, saga_id=hold.saga_id))
        return Decision(
            state,
            send=tuple(send),
            events=tuple(events),
            clear_deadlines=frozenset(_expiry(rid) for rid, _ in due),
        )

    # --- commands -----------------------------------------------------------------------

    def _set(self, state: LedgerState, cmd: c.SetCapacity, ctx: Context) -> Decision[LedgerState]:
        if cmd.on_hand < state.reserved:
            refused = c.CapacitySetRefused(
                **_totals(state),
                requested=cmd.on_hand,
                reason=f"{state.reserved} units are reserved; on_hand cannot go below that",
            )
            return Decision(state, send=reply(ctx, refused), events=(refused,))
        new = state.model_copy(update={"on_hand": cmd.on_hand})
        fact = c.CapacitySet(**_totals(new))
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _reserve(self, state: LedgerState, cmd: c.Reserve, ctx: Context) -> Decision[LedgerState]:
        rid = cmd.reservation_id
        if rid in state.holds or rid in state.closed:
            return Decision(state, send=reply(ctx, self._status_of(state, rid)))
        if state.available < cmd.quantity:
            rejected = c.ReservationRejected(
                **_totals(state),
                reservation_id=rid,
                quantity=cmd.quantity,
                reason=f"insufficient stock: requested {cmd.quantity}, available {state.available}",
            )
            new = self._remember(state, rid, Closed(outcome="rejected", quantity=cmd.quantity))
            return Decision(new, send=reply(ctx, rejected), events=(rejected,))
        expires_at = ctx.now + timedelta(seconds=cmd.ttl_seconds)
        hold = Hold(
            quantity=cmd.quantity, expires_at=expires_at, saga_id=ctx.saga_id, reply_to=ctx.reply_to
        )
        new = state.model_copy(update={"holds": {**state.holds, rid: hold}})
        fact = c.Reserved(
            **_totals(new),
            reservation_id=rid,
            quantity=cmd.quantity,
            expires_at=expires_at.isoformat(),
        )
        return Decision(
            new, send=reply(ctx, fact), events=(fact,), set_deadlines={_expiry(rid): expires_at}
        )

    def _confirm(self, state: LedgerState, cmd: c.Confirm, ctx: Context) -> Decision[LedgerState]:
        rid = cmd.reservation_id
        hold = state.holds.get(rid)
        if hold is None:
            return Decision(state, send=reply(ctx, self._status_of(state, rid)))
        sold = state.model_copy(update={"on_hand": state.on_hand - hold.quantity})
        new = self._close(sold, rid, "confirmed", hold.quantity)
        fact = c.Confirmed(**_totals(new), reservation_id=rid, quantity=hold.quantity)
        return Decision(
            new, send=reply(ctx, fact), events=(fact,), clear_deadlines=frozenset({_expiry(rid)})
        )

    def _cancel(self, state: LedgerState, cmd: c.Cancel, ctx: Context) -> Decision[LedgerState]:
        rid = cmd.reservation_id
        hold = state.holds.get(rid)
        closed = state.closed.get(rid)
        if hold is not None:
            new = self._close(state, rid, "cancelled", hold.quantity)
            fact = c.Released(
                **_totals(new), reservation_id=rid, quantity=hold.quantity, reason="cancelled"
            )
        elif closed is not None and closed.outcome == "confirmed":
            restocked = state.model_copy(update={"on_hand": state.on_hand + closed.quantity})
            new = self._close(restocked, rid, "refunded", closed.quantity)
            fact = c.Released(
                **_totals(new), reservation_id=rid, quantity=closed.quantity, reason="refunded"
            )
        elif closed is not None:
            return Decision(state)  # already released or never held: nothing to give back
        else:
            # A cancel before its reserve: leave a tombstone so a late reserve is refused.
            new = self._remember(state, rid, Closed(outcome="cancelled", quantity=0))
            return Decision(new)
        return Decision(
            new, send=reply(ctx, fact), events=(fact,), clear_deadlines=frozenset({_expiry(rid)})
        )

    # --- helpers ------------------------------------------------------------------------

    def _close(self, state: LedgerState, rid: str, outcome: Outcome, quantity: int) -> LedgerState:
        holds = {k: v for k, v in state.holds.items() if k != rid}
        return self._remember(
            state.model_copy(update={"holds": holds}),
            rid,
            Closed(outcome=outcome, quantity=quantity),
        )

    def _remember(self, state: LedgerState, rid: str, closed: Closed) -> LedgerState:
        # The newest ``closed_window`` entries, ``rid`` last. A hot key's window is full: a
        # C-level copy and deleting the oldest few keeps this cheap per decision (a
        # comprehension over the whole window took most of a reserve's time).
        entries = dict(state.closed)
        entries.pop(rid, None)
        entries[rid] = closed
        for oldest in list(islice(entries, max(0, len(entries) - self.closed_window))):
            del entries[oldest]
        return state.model_copy(update={"closed": entries})

    def _status_of(self, state: LedgerState, rid: str) -> Message:
        """The fact that answers a repeated command about ``rid``."""
        totals = _totals(state)
        if (hold := state.holds.get(rid)) is not None:
            return c.Reserved(
                **totals,
                reservation_id=rid,
                quantity=hold.quantity,
                expires_at=hold.expires_at.isoformat(),
            )
        closed = state.closed.get(rid)
        if closed is None:
            return c.ConfirmRefused(**totals, reservation_id=rid, reason="unknown reservation")
        if closed.outcome == "confirmed":
            return c.Confirmed(**totals, reservation_id=rid, quantity=closed.quantity)
        if closed.outcome == "rejected":
            return c.ReservationRejected(
                **totals, reservation_id=rid, quantity=closed.quantity, reason="insufficient stock"
            )
        return c.ConfirmRefused(
            **totals, reservation_id=rid, reason=f"reservation {closed.outcome}"
        )


def _totals(state: LedgerState) -> dict[str, int]:
    return {"on_hand": state.on_hand, "reserved": state.reserved}
