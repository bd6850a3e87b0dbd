"""The saga and both participants together, over an in-memory bus.

Every message goes through its wire format and every record through its storage format.
"""

from datetime import timedelta
from decimal import Decimal

import pytest

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.definitions.order_saga import OrderSaga
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway

from .helpers import Bus, at, envelope

pytestmark = pytest.mark.unit


def shop(**stock: int) -> Bus:
    bus = Bus.of(
        OrderSaga(), CapacityLedger(name="inventory", entity_type="product"), PaymentGateway()
    )
    for product, units in stock.items():
        bus.send("inventory", envelope(lc.SetCapacity(on_hand=units), key=product))
    return bus


def order(bus: Bus, order_id: str, method: str = "card", **quantities: int) -> None:
    lines = tuple(
        oc.OrderLine(product_id=p, quantity=q, unit_price=Decimal("10.00"))
        for p, q in quantities.items()
    )
    place = oc.PlaceOrder(customer_id="c1", lines=lines, payment=oc.PaymentDetails(method=method))
    bus.send("order-saga", envelope(place, key=order_id, saga_id=order_id))


def stock(bus: Bus, product: str) -> tuple[int, int]:
    state = bus.state("inventory", product)
    return state.on_hand, state.reserved


def order_statuses(bus: Bus, order_id: str) -> list[str]:
    """The statuses the order's events put it in, its start fact's (PENDING) included."""
    announced = (
        OrderSaga.STATUSES.announced(e.type, e.payload)
        for e in bus.published
        if e.key == f"order:{order_id}"
    )
    return [status for status in announced if status is not None]


def test_an_order_goes_through_and_the_stock_is_sold():
    bus = shop(p1=5, p2=3)
    order(bus, "o-1", p1=2, p2=1)
    assert order_statuses(bus, "o-1") == [
        "PENDING",
        "AUTHORIZING",
        "CONFIRMING",
        "CAPTURING",
        "CONFIRMED",
    ]
    assert (stock(bus, "p1"), stock(bus, "p2")) == ((3, 0), (2, 0))
    assert bus.state("payment", "o-1").status == "CAPTURED"
    assert bus.state("payment", "o-1").amount == Decimal("30.00")


def test_two_orders_for_the_last_unit_one_wins_and_the_other_is_rejected():
    # given both orders' reserves reach the ledger before any answer goes back
    bus = shop(p1=1, p2=5)
    bus.paused.add("inventory")
    order(bus, "o-a", p2=1, p1=1)
    order(bus, "o-b", p2=1, p1=1)
    bus.resume("inventory")
    # then exactly one gets the last unit
    finals = {o: order_statuses(bus, o)[-1] for o in ("o-a", "o-b")}
    assert finals == {"o-a": "CONFIRMED", "o-b": "REJECTED"}
    assert stock(bus, "p1") == (0, 0)
    assert stock(bus, "p2") == (4, 0)  # o-b's hold on p2 was released


def test_a_declined_payment_puts_all_the_stock_back():
    bus = shop(p1=5, p2=3)
    order(bus, "o-1", method="decline", p1=2, p2=1)
    assert order_statuses(bus, "o-1")[-1] == "CANCELLED"
    assert (stock(bus, "p1"), stock(bus, "p2")) == ((5, 0), (3, 0))
    assert bus.state("payment", "o-1").status == "DECLINED"


def test_a_payment_gateway_outage_times_out_and_a_late_authorize_is_voided():
    # given the payment channel is down when the order asks for an authorization
    bus = shop(p1=5)
    bus.paused.add("payment")
    order(bus, "o-1", p1=2)
    assert stock(bus, "p1") == (5, 2)
    # when the step times out, then the order is cancelled and the stock released
    bus.tick(at(30))
    assert order_statuses(bus, "o-1")[-1] == "CANCELLED"
    assert stock(bus, "p1") == (5, 0)
    # when the gateway comes back, then the authorize and the void both land: no money held
    bus.resume("payment", at(31))
    assert bus.state("payment", "o-1").status == "VOIDED"
    assert order_statuses(bus, "o-1")[-1] == "CANCELLED"


def test_an_order_that_outlives_its_reservations_is_cancelled_and_sells_nothing():
    bus = Bus.of(
        OrderSaga(step_timeout=timedelta(minutes=10)),
        CapacityLedger(name="inventory", entity_type="product"),
        PaymentGateway(),
    )
    bus.send("inventory", envelope(lc.SetCapacity(on_hand=5), key="p1"))
    bus.paused.add("payment")
    order(bus, "o-1", p1=2)
    bus.tick(at(300))  # the hold's TTL, well before the saga's own timeout
    assert order_statuses(bus, "o-1")[-1] == "CANCELLED"
    assert stock(bus, "p1") == (5, 0)


def test_every_entity_stream_is_numbered_without_gaps():
    bus = shop(p1=1, p2=5)
    order(bus, "o-a", p2=1, p1=1)
    order(bus, "o-b", p2=1, p1=1)
    order(bus, "o-c", method="decline", p2=1)
    streams: dict[str, list[int]] = {}
    for e in bus.published:
        streams.setdefault(e.key, []).append(e.sequence)
    assert set(streams) >= {"order:o-a", "order:o-b", "order:o-c", "product:p1", "payment:o-c"}
    assert all(seq == list(range(1, len(seq) + 1)) for seq in streams.values())
