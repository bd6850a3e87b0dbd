"""The capacity ledger participant: reserve / confirm / cancel with a TTL on every hold.

Keyed by the entity whose units it guards (a product's stock, a course's seats), so every
command for one entity is decided, in order, against a state that includes all earlier ones:
two orders racing for the last unit cannot both win, and no lock is needed.
Invariant: ``0 <= reserved <= on_hand`` after every decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from sagas.contracts import ledger as c
from sagas.machinery.history import History
from sagas.machinery.process import Command, Context, Decision, Fact, merge
from sagas.machinery.step import reply
from sagas.messages import Message
from sagas.participants.retention import DEFAULT_RETENTION, epoch_seconds, remember

Outcome = Literal["confirmed", "rejected", "cancelled", "expired", "refunded"]


class Hold(BaseModel):
    model_config = ConfigDict(frozen=True)
    quantity: int
    expires_at: datetime
    saga_id: str | None = None
    reply_to: str | None = None


class Closed(NamedTuple):
    """A finished reservation. A tuple, stored as a JSON array (``["confirmed", 1, 1763...]``):
    a hot key holds a thousand of these, so they are kept small and serialized without a
    model per entry (and stored in chunks written once: :mod:`sagas.machinery.history`).
    Records stored before ``at`` existed hold ``{"outcome": ..., "quantity": ...}`` objects;
    they still validate (``at`` 0)."""

    outcome: Outcome
    quantity: int
    at: int = 0
    """When it closed, in whole seconds since the epoch (0: unknown, stored before ages)."""


class LedgerState(BaseModel):
    model_config = ConfigDict(frozen=True)
    on_hand: int = 0
    holds: dict[str, Hold] = {}
    closed: History[Closed] = Field(default_factory=History)
    """Recently finished reservations, oldest first, to answer repeats and refund sales:
    kept for the ledger's retention, and never more than its ``closed_window``."""

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
    """Finished reservations older than this are forgotten (see :meth:`_remember`)."""
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
            state = self._close(state, rid, "expired", hold.quantity, ctx)
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
            new = self._remember(state, rid, Closed("rejected", cmd.quantity), ctx)
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
        new = self._close(sold, rid, "confirmed", hold.quantity, ctx)
        fact = c.Confirmed(**_totals(new), reservation_id=rid, quantity=hold.quantity)
        return Decision(
            new, send=reply(ctx, fact), events=(fact,), clear_deadlines=frozenset({_expiry(rid)})
        )

    def _cancel(self, state: LedgerState, cmd: c.Cancel, ctx: Context) -> Decision[LedgerState]:
        rid = cmd.reservation_id
        hold = state.holds.get(rid)
        closed = state.closed.get(rid)
        if hold is not None:
            new = self._close(state, rid, "cancelled", hold.quantity, ctx)
            fact = c.Released(
                **_totals(new), reservation_id=rid, quantity=hold.quantity, reason="cancelled"
            )
        elif closed is not None and closed.outcome == "confirmed":
            restocked = state.model_copy(update={"on_hand": state.on_hand + closed.quantity})
            new = self._close(restocked, rid, "refunded", closed.quantity, ctx)
            fact = c.Released(
                **_totals(new), reservation_id=rid, quantity=closed.quantity, reason="refunded"
            )
        elif closed is not None:
            return Decision(state)  # already released or never held: nothing to give back
        else:
            # A cancel before its reserve: leave a tombstone so a late reserve is refused.
            new = self._remember(state, rid, Closed("cancelled", 0), ctx)
            return Decision(new)
        return Decision(
            new, send=reply(ctx, fact), events=(fact,), clear_deadlines=frozenset({_expiry(rid)})
        )

    # --- helpers ------------------------------------------------------------------------

    def _close(
        self, state: LedgerState, rid: str, outcome: Outcome, quantity: int, ctx: Context
    ) -> LedgerState:
        holds = {k: v for k, v in state.holds.items() if k != rid}
        return self._remember(
            state.model_copy(update={"holds": holds}), rid, Closed(outcome, quantity), ctx
        )

    def _remember(self, state: LedgerState, rid: str, closed: Closed, ctx: Context) -> LedgerState:
        """``state`` with ``rid`` closed now (moved last), less what is past the retention.

        Why the retention is safe: a finished reservation is remembered to answer a command
        about it that comes again or late. The machinery's ``seen`` window drops exact
        repeats of recent messages; what reaches this map is a command re-sent by its saga
        (a saga worker that crashed before it stored its batch re-decides and re-sends, so
        the repeat comes after the worker's restart) or a compensation. A saga waits on a
        step for at most its step timeout (30 s by default) and then compensates, and a hold
        it made lives at most the reservation TTL (5 minutes). Forgetting an entry is
        harmless for a repeated Confirm (refused; the saga is past that step and ignores it)
        and for a repeated Cancel (a tombstone); a repeated Reserve would place a new hold,
        which the saga's compensation or the TTL releases: availability dips, nothing is
        sold twice. The one entry whose loss costs stock is a confirmed sale that a saga
        cancels (capture refused or timed out): that cancel is sent within a step timeout
        of the confirm. Ten minutes is twenty step timeouts and twice the TTL, the margin
        for a worker restart or a backlog in between. ``closed_window`` bounds the size
        first on a key hotter than ``closed_window`` closes per retention (1000 per 10
        minutes: 1.7/s): there the horizon is ``closed_window`` closes, as before ages, and
        above ~33 closes/s it is shorter than a step timeout. The entries are stored in
        chunks written once (:mod:`sagas.machinery.history`), so the window no longer costs
        every write; it bounds what a key holds in memory and reads back after a restart
        (a full window is ~32 chunks).
        """
        entries = remember(
            state.closed,
            rid,
            closed._replace(at=epoch_seconds(ctx.now)),
            lambda entry: entry.at,
            ctx.now,
            self.retention,
            self.closed_window,
        )
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
