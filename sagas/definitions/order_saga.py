"""The order saga: reserve every line -> authorize payment -> confirm lines -> capture.

Any failure runs the compensations of every step taken so far: cancel every reservation
that might exist (a cancel for a product is sent after its reserve on the same partition,
so it always lands after it) and void the payment if one was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.machinery.process import Command, Context, Decision, Fact
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Message

LineStatus = Literal["pending", "held", "confirmed", "rejected", "released"]
PaymentProgress = Literal["none", "requested", "authorized", "captured", "declined"]
STEP_DEADLINE = "step"


class LineState(BaseModel):
    model_config = ConfigDict(frozen=True)
    product_id: str
    quantity: int
    unit_price: Decimal
    status: LineStatus = "pending"


class OrderState(BaseModel):
    model_config = ConfigDict(frozen=True)
    status: oc.OrderStatus | None = None
    customer_id: str = ""
    lines: tuple[LineState, ...] = ()
    payment_method: str = ""
    total: Decimal = Decimal(0)
    payment: PaymentProgress = "none"
    reason: str | None = None

    @property
    def final(self) -> bool:
        return self.status in oc.FINAL_STATUSES

    def with_line(self, product_id: str, status: LineStatus) -> OrderState:
        lines = tuple(
            line.model_copy(update={"status": status}) if line.product_id == product_id else line
            for line in self.lines
        )
        return self.model_copy(update={"lines": lines})

    def all_lines(self, status: LineStatus) -> bool:
        return all(line.status == status for line in self.lines)


def reservation_id(order_id: str, product_id: str) -> str:
    return f"{order_id}:{product_id}"


def product_of(order_id: str, reservation: str) -> str:
    """The product of one of this order's reservations (order ids may contain colons too)."""
    return reservation.removeprefix(f"{order_id}:")


@dataclass(frozen=True)
class OrderSaga:
    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=oc.OrderStatusChanged,
        statuses=get_args(oc.OrderStatus),
        final=oc.FINAL_STATUSES,
        failed=oc.FAILED_STATUSES,
        start=oc.OrderPlaced,
    )
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (
        oc.PlaceOrder,
        oc.CancelOrder,
        # The inventory's answers to Reserve, Confirm and Cancel (a repeated or unknown
        # reservation is answered ConfirmRefused), and an expired hold's Released.
        lc.Reserved,
        lc.ReservationRejected,
        lc.Confirmed,
        lc.ConfirmRefused,
        lc.Released,
        # The payment's answers to Authorize, Capture and Void (Voided only passes).
        pc.Authorized,
        pc.Declined,
        pc.Captured,
        pc.CaptureRefused,
        pc.Voided,
    )
    FACTS: ClassVar[tuple[type[Message], ...]] = (
        oc.OrderPlaced,
        oc.OrderStatusChanged,
        oc.CancelRefused,
    )
    KEY: ClassVar[str] = "the order id, which is also the saga id"
    name: str = "order-saga"
    entity_type: str = "order"
    inventory: str = "inventory"
    payments: str = "payment"
    step_timeout: timedelta = timedelta(seconds=30)
    reservation_ttl: timedelta = timedelta(minutes=5)
    state_type: type[OrderState] = OrderState

    def initial(self, key: str) -> OrderState:
        return OrderState()

    def is_final(self, state: OrderState) -> bool:
        """A final order retires (sagas/machinery/retirement.py)."""
        return state.final

    def decide(self, state: OrderState, message: Message, ctx: Context) -> Decision[OrderState]:
        match message:
            case oc.PlaceOrder():
                return self._place(state, message, ctx)
            case oc.CancelOrder():
                return self._cancel(state, message, ctx)
        if state.status is None or state.final:
            return Decision(state)  # a late or stray reply; compensations were already sent
        match message:
            case lc.Reserved():
                return self._reserved(state, product_of(ctx.key, message.reservation_id), ctx)
            case lc.ReservationRejected():
                product = product_of(ctx.key, message.reservation_id)
                return self._fail(
                    state.with_line(product, "rejected"),
                    "REJECTED",
                    f"out of stock: {product} ({message.reason})",
                    ctx,
                )
            case lc.Released(reason="expired"):
                product = product_of(ctx.key, message.reservation_id)
                return self._fail(
                    state.with_line(product, "released"),
                    "CANCELLED",
                    f"reservation for {product} expired",
                    ctx,
                )
            case pc.Authorized() if state.status == "AUTHORIZING":
                return self._authorized(state, ctx)
            case pc.Declined():
                failed = state.model_copy(update={"payment": "declined"})
                return self._fail(failed, "CANCELLED", f"payment declined: {message.reason}", ctx)
            case lc.Confirmed() if state.status == "CONFIRMING":
                return self._confirmed(state, product_of(ctx.key, message.reservation_id), ctx)
            case lc.ConfirmRefused() if state.status == "CONFIRMING":
                product = product_of(ctx.key, message.reservation_id)
                return self._fail(
                    state.with_line(product, "released"),
                    "CANCELLED",
                    f"confirm refused for {product}: {message.reason}",
                    ctx,
                )
            case pc.Captured() if state.status == "CAPTURING":
                done = state.model_copy(update={"payment": "captured"})
                return self._move(done, "CONFIRMED", ctx, final=True)
            case pc.CaptureRefused():
                return self._fail(state, "CANCELLED", f"capture refused: {message.reason}", ctx)
        return Decision(state)

    def on_deadline(self, state: OrderState, name: str, ctx: Context) -> Decision[OrderState]:
        if name != STEP_DEADLINE or state.status is None or state.final:
            return Decision(state)
        return self._fail(state, "CANCELLED", "timeout", ctx)

    # --- transitions --------------------------------------------------------------------

    def _place(self, state: OrderState, cmd: oc.PlaceOrder, ctx: Context) -> Decision[OrderState]:
        if state.status is not None:
            return Decision(state)  # this order id is taken: the first placement wins
        lines = tuple(
            LineState(
                product_id=line.product_id, quantity=line.quantity, unit_price=line.unit_price
            )
            for line in cmd.lines
        )
        placed = OrderState(
            status="PENDING",
            customer_id=cmd.customer_id,
            lines=lines,
            payment_method=cmd.payment.method,
            total=cmd.total,
        )
        ttl = self.reservation_ttl.total_seconds()
        reserves = tuple(
            self._to_inventory(
                ctx,
                line.product_id,
                lc.Reserve(
                    reservation_id=reservation_id(ctx.key, line.product_id),
                    quantity=line.quantity,
                    ttl_seconds=ttl,
                ),
            )
            for line in lines
        )
        event = oc.OrderPlaced(
            customer_id=cmd.customer_id,
            lines=cmd.lines,
            payment_method=cmd.payment.method,
            total=cmd.total,
        )
        return Decision(
            placed,
            send=reserves,
            # OrderPlaced says the order is PENDING (STATUSES.start): no status event for it.
            events=(Fact(event, ctx.key),),
            set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout},
        )

    def _reserved(self, state: OrderState, product: str, ctx: Context) -> Decision[OrderState]:
        state = state.with_line(product, "held")
        if state.status != "PENDING" or not state.all_lines("held"):
            return Decision(state)
        authorizing = state.model_copy(update={"payment": "requested"})
        authorize = pc.Authorize(amount=state.total, method=state.payment_method)
        return self._move(authorizing, "AUTHORIZING", ctx, send=(self._to_payment(ctx, authorize),))

    def _authorized(self, state: OrderState, ctx: Context) -> Decision[OrderState]:
        state = state.model_copy(update={"payment": "authorized"})
        confirms = tuple(
            self._to_inventory(
                ctx,
                line.product_id,
                lc.Confirm(reservation_id=reservation_id(ctx.key, line.product_id)),
            )
            for line in state.lines
        )
        return self._move(state, "CONFIRMING", ctx, send=confirms)

    def _confirmed(self, state: OrderState, product: str, ctx: Context) -> Decision[OrderState]:
        state = state.with_line(product, "confirmed")
        if not state.all_lines("confirmed"):
            return Decision(state)
        return self._move(state, "CAPTURING", ctx, send=(self._to_payment(ctx, pc.Capture()),))

    def _cancel(self, state: OrderState, cmd: oc.CancelOrder, ctx: Context) -> Decision[OrderState]:
        if state.status is None:
            # Cancel overtook its placement: record it, so the placement is refused later.
            return self._move(
                state.model_copy(update={"reason": cmd.reason}), "CANCELLED", ctx, final=True
            )
        if state.status in ("PENDING", "AUTHORIZING", "CONFIRMING"):
            return self._fail(state, "CANCELLED", cmd.reason, ctx)
        refused = oc.CancelRefused(status=state.status, reason=f"order is already {state.status}")
        return Decision(state, events=(Fact(refused, ctx.key),))

    # --- building blocks ----------------------------------------------------------------

    def _fail(
        self, state: OrderState, status: oc.OrderStatus, reason: str, ctx: Context
    ) -> Decision[OrderState]:
        """Compensate every step taken so far and end in ``status``."""
        cancels = tuple(
            self._to_inventory(
                ctx,
                line.product_id,
                lc.Cancel(reservation_id=reservation_id(ctx.key, line.product_id)),
            )
            for line in state.lines
            if line.status in ("pending", "held", "confirmed")
        )
        lines = tuple(
            line.model_copy(update={"status": "released"}) if line.status != "rejected" else line
            for line in state.lines
        )
        voids = (
            (self._to_payment(ctx, pc.Void()),)
            if state.payment in ("requested", "authorized", "captured")
            else ()
        )
        failed = state.model_copy(update={"lines": lines, "reason": reason})
        return self._move(failed, status, ctx, send=(*cancels, *voids), final=True)

    def _move(
        self,
        state: OrderState,
        status: oc.OrderStatus,
        ctx: Context,
        send: tuple[Command, ...] = (),
        final: bool = False,
    ) -> Decision[OrderState]:
        moved = state.model_copy(update={"status": status})
        # Name the saga explicitly: a deadline that fires has no incoming message to copy it from.
        event = Fact(
            oc.OrderStatusChanged(status=status, reason=moved.reason if final else None), ctx.key
        )
        if final:
            return Decision(
                moved, send=send, events=(event,), clear_deadlines=frozenset({STEP_DEADLINE})
            )
        return Decision(
            moved,
            send=send,
            events=(event,),
            set_deadlines={STEP_DEADLINE: ctx.now + self.step_timeout},
        )

    def _to_inventory(self, ctx: Context, product_id: str, message: Message) -> Command:
        return Command(self.inventory, product_id, message, saga_id=ctx.key, reply_to=self.name)

    def _to_payment(self, ctx: Context, message: Message) -> Command:
        return Command(self.payments, ctx.key, message, saga_id=ctx.key, reply_to=self.name)
