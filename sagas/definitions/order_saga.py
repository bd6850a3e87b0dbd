"""The order saga: reserve every line -> authorize payment -> confirm lines -> capture.

Any failure gives back what every step took so far (the kit: sagas/machinery/kit.py): a
cancel for every reservation that may exist and a void of the payment if one was asked for.
A customer's cancel is taken until the capture is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar, get_args

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.machinery.kit import Cause, Flow, Saga, SagaState, Step
from sagas.machinery.legs import Leg
from sagas.machinery.process import Context, Decision
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Message


class LineState(Leg):
    """An order line: its reservation at the product's ledger."""

    quantity: int
    unit_price: Decimal

    @property
    def product_id(self) -> str:
        return self.key


class OrderState(SagaState):
    customer_id: str = ""
    lines: tuple[LineState, ...] = ()
    payment_method: str = ""
    total: Decimal = Decimal(0)
    payment: Leg | None = None

    @property
    def final(self) -> bool:
        return self.status in oc.FINAL_STATUSES


@dataclass(frozen=True)
class OrderSaga(Saga[OrderState]):
    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=oc.OrderStatusChanged,
        statuses=get_args(oc.OrderStatus),
        final=oc.FINAL_STATUSES,
        failed=oc.FAILED_STATUSES,
        start=oc.OrderPlaced,
    )
    COMMANDS: ClassVar[tuple[type[Message], ...]] = (oc.PlaceOrder, oc.CancelOrder)
    PORTS = {"inventory": lc.PORT, "payments": pc.PORT}
    LEGS = {"lines": "inventory", "payment": "payments"}
    FLOWS = {
        "order": Flow(
            steps=(
                Step("PENDING", hold=("lines",)),
                Step("AUTHORIZING", hold=("payment",)),
                Step("CONFIRMING", confirm=("lines",)),
                Step("CAPTURING", confirm=("payment",)),
            ),
            done="CONFIRMED",
            failed="CANCELLED",
            refused={"lines": "REJECTED"},
        )
    }
    OTHER_FACTS = (oc.CancelRefused,)
    KEY: ClassVar[str] = "the order id, which is also the saga id"
    name: str = "order-saga"
    entity_type: str = "order"
    inventory: str = "inventory"
    payments: str = "payment"
    step_timeout: timedelta = timedelta(seconds=30)
    reservation_ttl: timedelta = timedelta(minutes=5)
    state_type: type[OrderState] = OrderState

    def command(self, state: OrderState, message: Message, ctx: Context) -> Decision[OrderState]:
        if isinstance(message, oc.PlaceOrder):
            if state.status is not None:
                return Decision(state)  # this order id is taken: the first placement wins
            placed = oc.OrderPlaced(
                customer_id=message.customer_id,
                lines=message.lines,
                payment_method=message.payment.method,
                total=message.total,
            )
            return self.begin(self._placed(message, ctx), "order", ctx, message, start=placed)
        assert isinstance(message, oc.CancelOrder)
        if state.status is None:  # the cancel overtook its placement: the placement is refused
            return self.settle(state.but(reason=message.reason), "CANCELLED", ctx)
        if state.status in ("PENDING", "AUTHORIZING", "CONFIRMING"):
            return self.fail(state, ctx, message.reason)
        why = f"order is already {state.status}"
        return self.tell(state, oc.CancelRefused(status=state.status, reason=why), ctx)

    def _placed(self, cmd: oc.PlaceOrder, ctx: Context) -> OrderState:
        lines = tuple(
            LineState(key=line.product_id, rid=f"{ctx.key}:{line.product_id}",
                      quantity=line.quantity, unit_price=line.unit_price)
            for line in cmd.lines
        )  # fmt: skip
        return OrderState(customer_id=cmd.customer_id, lines=lines, total=cmd.total,
                          payment_method=cmd.payment.method, payment=Leg(key=ctx.key))  # fmt: skip

    def hold(
        self, state: OrderState, field: str, leg: Leg, ctx: Context, cause: Message | None
    ) -> Message:
        if isinstance(leg, LineState):
            ttl = self.reservation_ttl.total_seconds()
            return lc.Reserve(reservation_id=leg.rid, quantity=leg.quantity, ttl_seconds=ttl)
        return pc.Authorize(amount=state.total, method=state.payment_method)

    def why(self, cause: Cause) -> str:
        reason, product = getattr(cause.message, "reason", ""), cause.leg.key
        match cause.field, cause.outcome:
            case "lines", "refused":
                return f"out of stock: {product} ({reason})"
            case "lines", "released":
                return f"reservation for {product} expired"
            case "lines", _:
                return f"confirm refused for {product}: {reason}"
            case _, "refused":
                return f"payment declined: {reason}"
        return f"capture refused: {reason}"
