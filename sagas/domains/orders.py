"""Orders: the order saga reserves stock and authorizes a payment, then confirms and
captures both (or releases what it holds); stock and customers' orders as read models."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Protocol

from sagas.contracts import ledger, orders, payment
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.domain import Cancellation, Domain, ProcessChannel
from sagas.machinery.process import Process
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway, PaymentPolicy
from sagas.projections.declare import SagaType
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK

ORDER_SAGA, INVENTORY, PAYMENT = "order-saga", "inventory", "payment"


class OrderSettings(Protocol):
    """The settings the order domain's processes read."""

    @property
    def step_timeout_s(self) -> float: ...
    @property
    def reservation_ttl_s(self) -> float: ...
    @property
    def dedupe_retention_s(self) -> float: ...
    @property
    def decline_methods(self) -> frozenset[str]: ...
    @property
    def payment_max_amount(self) -> Decimal: ...
    @property
    def silent_methods(self) -> frozenset[str]: ...


def processes(settings: OrderSettings) -> list[Process[Any]]:
    policy = PaymentPolicy(
        decline_methods=settings.decline_methods,
        max_amount=settings.payment_max_amount,
        silent_methods=settings.silent_methods,
    )
    retention = timedelta(seconds=settings.dedupe_retention_s)
    return [
        OrderSaga(
            name=ORDER_SAGA,
            inventory=INVENTORY,
            payments=PAYMENT,
            step_timeout=timedelta(seconds=settings.step_timeout_s),
            reservation_ttl=timedelta(seconds=settings.reservation_ttl_s),
        ),
        CapacityLedger(name=INVENTORY, entity_type="product", retention=retention),
        PaymentGateway(name=PAYMENT, policy=policy),
    ]


DOMAIN = Domain(
    name="orders",
    contracts=(orders, ledger, payment),
    channels=(
        ProcessChannel(ORDER_SAGA, OrderSaga),
        ProcessChannel(INVENTORY, CapacityLedger),
        ProcessChannel(PAYMENT, PaymentGateway),
    ),
    processes=processes,
    read_models=(ORDERS, PRODUCT_STOCK),
    saga_types=(SagaType(entity_type="order", statuses=OrderSaga.STATUSES, model=ORDERS),),
    cancellations=(
        Cancellation(
            "order",
            lambda reason: orders.CancelOrder(reason=reason),
            lambda row: orders.PlaceOrder(
                customer_id=row.customer_id,
                lines=row.lines,
                payment=orders.PaymentDetails(method=row.payment_method),
            ),
        ),
    ),
    demo="sagaline.order_demo",
    api="services.api.orders",
)
