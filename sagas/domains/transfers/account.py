"""The account participant: holds funds for transfers out, promises to take transfers in.

Keyed by the account id, so every command on one account is decided in order against all
earlier ones: two transfers racing for the last funds cannot both be held. Its funds are the
reservation primitive (sagas/machinery/reservations.py) over the balance: a debit holds from
it and, committed, consumes it. A credit is a hold of nothing there (so its id is answered
once, tombstoned by a release that overtook it and remembered for the retention, like every
other), whose amount waits in ``incoming`` until it is committed and joins the balance.
A transfer only moves money between accounts; it enters only by opening one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from sagas.domains.transfers import contracts as t
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Context, Decision
from sagas.machinery.reservations import DEFAULT_RETENTION, Outcome, Reservations, Retention
from sagas.machinery.step import reply
from sagas.messages import Message

MAX_BALANCE = Decimal("999999999999.99")
"""What the read model's balance column holds: credits that would pass it are refused."""
NOTHING = Decimal(0)


class AccountState(BaseModel):
    model_config = ConfigDict(frozen=True)
    open: bool | None = None
    """None: never opened; False: closed (it settles what it holds, takes nothing new)."""
    funds: Reservations[Decimal] = Field(
        default_factory=lambda: Reservations[Decimal](on_hand=NOTHING)
    )
    incoming: dict[str, Decimal] = {}
    """Credits promised and not yet committed: reservation id -> amount."""

    def totals(self) -> dict[str, object]:
        status = {None: "unknown", True: "open", False: "closed"}[self.open]
        return {"balance": self.funds.on_hand, "on_hold": self.funds.held, "status": status}

    def but(self, funds: Reservations[Decimal], **incoming: Decimal | None) -> AccountState:
        kept = {k: v for k, v in {**self.incoming, **incoming}.items() if v is not None}
        return checked_copy(self, {"funds": funds, "incoming": kept})


@dataclass(frozen=True)
class Account:
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        t.OpenAccount, t.CloseAccount, t.HoldFunds, t.PrepareCredit, t.Commit, t.Release,
    )  # fmt: skip
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        t.AccountOpened, t.AccountClosed, t.FundsHeld, t.HoldRefused, t.Committed, t.Released,
    )  # fmt: skip
    KEY: ClassVar[str] = "the account id"
    name: str = "account"
    entity_type: str = "account"
    retention: timedelta = DEFAULT_RETENTION
    state_type: type[AccountState] = AccountState

    def initial(self, key: str) -> AccountState:
        return AccountState()

    def on_deadline(self, state: AccountState, name: str, ctx: Context) -> Decision[AccountState]:
        return Decision(state)  # no hold expires: a transfer's own step timeout releases it

    def decide(self, state: AccountState, message: Message, ctx: Context) -> Decision[AccountState]:
        keep, now, funds = Retention(self.retention), ctx.now, state.funds
        match message:
            case t.OpenAccount() if state.open is None:
                opened = AccountState(
                    open=True, funds=Reservations[Decimal](on_hand=message.balance)
                )
                return _told(opened, t.AccountOpened(**opened.totals()), ctx)
            case t.CloseAccount() if state.open:
                closed = checked_copy(state, {"open": False})
                return _told(closed, t.AccountClosed(**closed.totals()), ctx)
            case t.OpenAccount() | t.CloseAccount():
                fact = (t.AccountOpened if state.open else t.AccountClosed)(**state.totals())
                return Decision(state, send=reply(ctx, fact))  # already so: nothing changes
            case t.HoldFunds() | t.PrepareCredit() if state.open is None:
                # Answered, not stored: a stray key keeps no record.
                stray = t.HoldRefused(**state.totals(), reservation_id=message.reservation_id,
                                      reason="no such account")  # fmt: skip
                return Decision(state, send=reply(ctx, stray))
            case t.HoldFunds() | t.PrepareCredit():
                rid, amount = message.reservation_id, message.amount
                debit = isinstance(message, t.HoldFunds)
                if why := "" if funds.knows(rid) else _refusal(state, amount, debit):
                    kept, out = funds.refuse(rid, amount, now, keep, note=why)
                    return _answer(state.but(kept), out, ctx)
                held, out = funds.hold(rid, amount if debit else NOTHING, now, keep)
                if debit or out.repeat:
                    return _answer(state.but(held), out, ctx, state.incoming.get(rid))
                return _answer(state.but(held, **{rid: amount}), out, ctx, amount)
            case t.Commit():
                rid = message.reservation_id
                committed, out = funds.commit(rid, now, keep)
                credit = state.incoming.get(rid) if not out.repeat else None
                if credit is not None:
                    committed = committed.receive(credit)
                return _answer(state.but(committed, **{rid: None}), out, ctx, credit)
            case t.Release():
                rid = message.reservation_id
                if funds.status(rid).kind == "confirmed":
                    return _answer(state, funds.status(rid), ctx)  # committed money stays
                released, out = funds.release(rid, now, keep)
                return _answer(state.but(released, **{rid: None}), out, ctx)
        return Decision(state)


def _refusal(state: AccountState, amount: Decimal, debit: bool) -> str:
    if not state.open:
        return "account closed"
    if debit and amount > state.funds.available:
        return f"insufficient funds: {state.funds.available} available"
    if not debit and state.funds.on_hand + sum(state.incoming.values()) + amount > MAX_BALANCE:
        return f"the balance would pass {MAX_BALANCE}"
    return ""


def _answer(
    state: AccountState, out: Outcome[Decimal], ctx: Context, credit: Decimal | None = None
) -> Decision[AccountState]:
    """Reply what ``out`` says; a change is also a fact about the account."""
    totals, rid, amount = state.totals(), out.rid, out.amount or NOTHING
    fact: Message
    match out.kind:
        case "held":  # a credit's amount is promised, not held
            fact = t.FundsHeld(**totals, reservation_id=rid, amount=credit or amount)
        case "confirmed":  # signed: a debit's amount left the balance, a credit's joined it
            fact = t.Committed(**totals, reservation_id=rid, amount=credit or -amount)
        case "cancelled":
            fact = t.Released(**totals, reservation_id=rid)
        case "rejected":
            fact = t.HoldRefused(**totals, reservation_id=rid, reason=out.note or "refused")
        case "tombstone":
            return Decision(state)  # released before its hold: the hold will be refused
        case _:
            fact = t.CommitRefused(**totals, reservation_id=rid, reason=f"reservation {out.kind}")
    if out.repeat or isinstance(fact, t.CommitRefused):
        return Decision(state, send=reply(ctx, fact))
    return _told(state, fact, ctx)


def _told(state: AccountState, fact: Message, ctx: Context) -> Decision[AccountState]:
    return Decision(state, send=reply(ctx, fact), events=(fact,))
