"""The payment participant: authorize / capture / void against a simulated gateway.

Keyed by order id. Declines are deterministic so tests and demos can provoke them: a
method in ``decline_methods`` or an amount above ``max_amount`` is declined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from sagas.contracts import payment as p
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Context, Decision
from sagas.machinery.step import reply
from sagas.messages import Message

PaymentStatus = Literal[
    "NEW", "PENDING", "AUTHORIZED", "DECLINED", "CAPTURED", "VOIDED", "REFUNDED"
]

FINAL_PAYMENT: frozenset[str] = frozenset({"DECLINED", "CAPTURED", "VOIDED", "REFUNDED"})


class PaymentState(BaseModel):
    model_config = ConfigDict(frozen=True)
    status: PaymentStatus = "NEW"
    amount: Decimal = Decimal(0)
    method: str = ""


@dataclass(frozen=True)
class PaymentPolicy:
    decline_methods: frozenset[str] = frozenset({"decline"})
    max_amount: Decimal = Decimal("10000")
    silent_methods: frozenset[str] = frozenset()
    """Methods the simulated gateway never answers: how a participant that hangs looks."""

    def decline_reason(self, amount: Decimal, method: str) -> str | None:
        if method in self.decline_methods:
            return f"method {method!r} declined by the gateway"
        if amount > self.max_amount:
            return f"amount {amount} exceeds the limit of {self.max_amount}"
        return None


@dataclass(frozen=True)
class PaymentGateway:
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (p.Authorize, p.Capture, p.Void)
    FACTS: ClassVar[tuple[type[Message], ...]] = (p.Authorized, p.Declined, p.Captured, p.Voided)
    """CaptureRefused is a reply only: refusing changes nothing about the payment."""
    KEY: ClassVar[str] = "the order id (the saga id): one payment per order"
    name: str = "payment"
    entity_type: str = "payment"
    policy: PaymentPolicy = field(default_factory=PaymentPolicy)
    state_type: type[PaymentState] = PaymentState

    def initial(self, key: str) -> PaymentState:
        return PaymentState()

    def is_final(self, state: PaymentState) -> bool:
        """A payment captured, declined, voided or refunded retires (sagas/machinery/
        retirement.py). A captured one may still be refunded by a saga that timed out
        while capturing: that Void comes within a step timeout, far inside the retention."""
        return state.status in FINAL_PAYMENT

    def decide(self, state: PaymentState, message: Message, ctx: Context) -> Decision[PaymentState]:
        match message:
            case p.Authorize():
                return self._authorize(state, message, ctx)
            case p.Capture():
                return self._capture(state, ctx)
            case p.Void():
                return self._void(state, ctx)
        return Decision(state)

    def on_deadline(self, state: PaymentState, name: str, ctx: Context) -> Decision[PaymentState]:
        return Decision(state)

    def _authorize(
        self, state: PaymentState, cmd: p.Authorize, ctx: Context
    ) -> Decision[PaymentState]:
        if state.status != "NEW":
            return Decision(state, send=reply(ctx, _status_fact(state)))
        if cmd.method in self.policy.silent_methods:
            hung = PaymentState(status="PENDING", amount=cmd.amount, method=cmd.method)
            return Decision(hung)
        reason = self.policy.decline_reason(cmd.amount, cmd.method)
        fact: Message
        if reason is None:
            new = PaymentState(status="AUTHORIZED", amount=cmd.amount, method=cmd.method)
            fact = p.Authorized(amount=cmd.amount, method=cmd.method)
        else:
            new = PaymentState(status="DECLINED", amount=cmd.amount, method=cmd.method)
            fact = p.Declined(amount=cmd.amount, method=cmd.method, reason=reason)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _capture(self, state: PaymentState, ctx: Context) -> Decision[PaymentState]:
        if state.status == "CAPTURED":
            return Decision(state, send=reply(ctx, p.Captured(amount=state.amount)))
        if state.status != "AUTHORIZED":
            refused = p.CaptureRefused(reason=f"payment is {state.status.lower()}")
            return Decision(state, send=reply(ctx, refused))
        new = checked_copy(state, {"status": "CAPTURED"})
        fact = p.Captured(amount=state.amount)
        return Decision(new, send=reply(ctx, fact), events=(fact,))

    def _void(self, state: PaymentState, ctx: Context) -> Decision[PaymentState]:
        if state.status == "PENDING":
            return Decision(checked_copy(state, {"status": "VOIDED"}))
        if state.status in ("AUTHORIZED", "CAPTURED"):
            refunded = state.status == "CAPTURED"
            new = checked_copy(state, {"status": "REFUNDED" if refunded else "VOIDED"})
            fact = p.Voided(amount=state.amount, refunded=refunded)
            return Decision(new, send=reply(ctx, fact), events=(fact,))
        if state.status == "NEW":
            # Void before authorize (a timed-out saga): tombstone, a late authorize is declined.
            return Decision(checked_copy(state, {"status": "VOIDED"}))
        return Decision(state)


def _status_fact(state: PaymentState) -> Message:
    if state.status == "AUTHORIZED":
        return p.Authorized(amount=state.amount, method=state.method)
    if state.status == "CAPTURED":
        return p.Captured(amount=state.amount)
    return p.Declined(
        amount=state.amount, method=state.method, reason=f"payment is {state.status.lower()}"
    )
