"""The order saga: reserve every line -> authorize -> confirm lines -> capture."""

from datetime import timedelta
from decimal import Decimal

import pytest

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Outbound
from sagas.machinery.step import step
from sagas.messages import Envelope, Message

from .helpers import T0, Driver, at, commands, envelope, event_envelopes, events, sent, tick

pytestmark = pytest.mark.unit

SAGA = OrderSaga()
ORDER = "o-1"
LINES = (("p1", 2, "10.00"), ("p2", 1, "5.50"))  # total 25.50


def place(*lines: tuple[str, int, str], method: str = "card", order: str = ORDER) -> Envelope:
    order_lines = tuple(
        oc.OrderLine(product_id=p, quantity=q, unit_price=Decimal(u)) for p, q, u in lines or LINES
    )
    message = oc.PlaceOrder(
        customer_id="c1", lines=order_lines, payment=oc.PaymentDetails(method=method)
    )
    return envelope(message, key=order, saga_id=order)


def answer(fact: Message, order: str = ORDER) -> Envelope:
    """A participant's reply, as it reaches the saga: keyed by the saga id."""
    return envelope(fact, key=order, saga_id=order)


def reserved(product: str, order: str = ORDER) -> Envelope:
    rid = f"{order}:{product}"
    fact = lc.Reserved(on_hand=9, reserved=1, reservation_id=rid, quantity=1, expires_at="x")
    return answer(fact, order)


def rejected(product: str) -> Envelope:
    fact = lc.ReservationRejected(
        on_hand=0,
        reserved=0,
        reservation_id=f"{ORDER}:{product}",
        quantity=1,
        reason="insufficient stock: requested 1, available 0",
    )
    return answer(fact)


def confirmed(product: str) -> Envelope:
    fact = lc.Confirmed(on_hand=8, reserved=0, reservation_id=f"{ORDER}:{product}", quantity=1)
    return answer(fact)


def released(product: str, reason: str) -> Envelope:
    fact = lc.Released(
        on_hand=9, reserved=0, reservation_id=f"{ORDER}:{product}", quantity=1, reason=reason
    )
    return answer(fact)


AUTHORIZED = pc.Authorized(amount=Decimal("25.50"), method="card")
CAPTURED = pc.Captured(amount=Decimal("25.50"))


def statuses(outbound: tuple[Outbound, ...]) -> list[str]:
    return [e.status for e in events(outbound) if isinstance(e, oc.OrderStatusChanged)]


def cancels(*products: str) -> list[tuple[str, str, str]]:
    return [("inventory", p, "ledger.Cancel") for p in products]


VOID = [("payment", ORDER, "payment.Void")]


def saga_in(status: str) -> Driver:
    """A saga for :data:`LINES` driven to ``status`` along the happy path, at T0."""
    saga = Driver(SAGA)
    path = {
        "PENDING": [place()],
        "AUTHORIZING": [place(), reserved("p1"), reserved("p2")],
        "CONFIRMING": [place(), reserved("p1"), reserved("p2"), answer(AUTHORIZED)],
        "CAPTURING": [
            *[place(), reserved("p1"), reserved("p2"), answer(AUTHORIZED)],
            *[confirmed("p1"), confirmed("p2")],
        ],
    }
    steps = path.get(status) or [*path["CAPTURING"], answer(CAPTURED)]
    for env in steps:
        saga(env)
    assert saga.state.status == status
    return saga


# --- happy path ---------------------------------------------------------------------------


def test_happy_path_of_a_two_line_order():
    saga = Driver(SAGA)

    # when the order is placed, then both lines are reserved and the order is PENDING
    out = saga(place()).outbound
    assert commands(out) == [
        ("inventory", "p1", "ledger.Reserve"),
        ("inventory", "p2", "ledger.Reserve"),
    ]
    assert sent(out) == [
        lc.Reserve(reservation_id="o-1:p1", quantity=2, ttl_seconds=300),
        lc.Reserve(reservation_id="o-1:p2", quantity=1, ttl_seconds=300),
    ]
    assert {(o.envelope.saga_id, o.envelope.reply_to) for o in out if o.channel == "inventory"} == {
        (ORDER, "order-saga")
    }
    # OrderPlaced alone says the order is PENDING: no status event repeats it
    assert [type(e) for e in events(out)] == [oc.OrderPlaced]
    assert events(out)[0].total == Decimal("25.50")
    assert SAGA.STATUSES.announced(oc.OrderPlaced.TYPE, {}) == "PENDING"
    assert saga.state.status == "PENDING"

    # when the first line is held, then the saga waits for the other
    out = saga(reserved("p1")).outbound
    assert out == ()

    # when every line is held, then the payment is authorized for the total
    out = saga(reserved("p2")).outbound
    assert commands(out) == [("payment", ORDER, "payment.Authorize")]
    assert sent(out) == [pc.Authorize(amount=Decimal("25.50"), method="card")]
    assert statuses(out) == ["AUTHORIZING"]

    # when it is authorized, then every line is confirmed
    out = saga(answer(AUTHORIZED)).outbound
    assert commands(out) == [
        ("inventory", "p1", "ledger.Confirm"),
        ("inventory", "p2", "ledger.Confirm"),
    ]
    assert statuses(out) == ["CONFIRMING"]

    # when every line is confirmed, then the payment is captured
    assert saga(confirmed("p1")).outbound == ()
    out = saga(confirmed("p2")).outbound
    assert commands(out) == [("payment", ORDER, "payment.Capture")]
    assert statuses(out) == ["CAPTURING"]

    # when it is captured, then the order is CONFIRMED and no deadline is left
    out = saga(answer(CAPTURED)).outbound
    assert commands(out) == []
    assert events(out) == [oc.OrderStatusChanged(status="CONFIRMED")]
    assert saga.record.deadlines == {}
    assert [line.status for line in saga.state.lines] == ["confirmed", "confirmed"]


def test_the_order_events_are_numbered_without_gaps():
    saga = saga_in("CONFIRMED")
    assert saga.record.sequence == 5  # Placed (PENDING) + four status changes


# --- failures and compensations -----------------------------------------------------------


def test_out_of_stock_rejects_the_order_and_cancels_the_held_line():
    saga = saga_in("PENDING")
    saga(reserved("p1"))
    out = saga(rejected("p2")).outbound
    assert commands(out) == cancels("p1")  # nothing to give back for p2, no payment asked
    assert statuses(out) == ["REJECTED"]
    assert saga.state.reason.startswith("out of stock: p2 (insufficient stock")
    assert events(out)[-1].reason == saga.state.reason
    assert saga.record.deadlines == {}


def test_out_of_stock_cancels_lines_whose_reservation_is_still_in_flight():
    saga = saga_in("PENDING")
    out = saga(rejected("p1")).outbound
    assert commands(out) == cancels("p2")
    assert statuses(out) == ["REJECTED"]
    assert "p1" in saga.state.reason


def test_a_declined_payment_cancels_every_line_and_voids_nothing():
    saga = saga_in("AUTHORIZING")
    decline = pc.Declined(amount=Decimal("25.50"), method="card", reason="card refused")
    out = saga(answer(decline)).outbound
    assert commands(out) == cancels("p1", "p2")
    assert statuses(out) == ["CANCELLED"]
    assert saga.state.reason == "payment declined: card refused"


def test_a_refused_confirm_cancels_the_other_lines_and_voids_the_payment():
    saga = saga_in("CONFIRMING")
    saga(confirmed("p1"))
    refusal = lc.ConfirmRefused(
        on_hand=9, reserved=0, reservation_id="o-1:p2", reason="reservation expired"
    )
    out = saga(answer(refusal)).outbound
    assert commands(out) == cancels("p1") + VOID
    assert statuses(out) == ["CANCELLED"]
    assert saga.state.reason == "confirm refused for p2: reservation expired"


def test_an_expired_reservation_cancels_the_order():
    saga = saga_in("AUTHORIZING")
    out = saga(released("p1", "expired")).outbound
    assert commands(out) == cancels("p2") + VOID
    assert statuses(out) == ["CANCELLED"]
    assert saga.state.reason == "reservation for p1 expired"


def test_a_step_that_is_not_answered_in_time_cancels_the_order():
    # given an order placed at T0 that no participant answers
    saga = saga_in("PENDING")
    assert saga.record.deadlines == {"step": T0 + SAGA.step_timeout}
    # when a tick arrives just before the timeout, then nothing happens
    assert saga(tick(ORDER), now=at(29)).outbound == ()
    assert saga.state.status == "PENDING"
    # when one arrives at the timeout, then the order is cancelled and every line cancelled
    out = saga(tick(ORDER), now=at(30)).outbound
    assert commands(out) == cancels("p1", "p2")
    assert statuses(out) == ["CANCELLED"]
    assert saga.state.reason == "timeout"
    assert {o.envelope.saga_id for o in out if o.channel == "inventory"} == {ORDER}
    # and a later tick does nothing more
    assert saga(tick(ORDER), now=at(99)).outbound == ()


def test_every_step_gets_a_fresh_timeout():
    saga = saga_in("PENDING")
    saga(reserved("p1"), now=at(10))
    saga(reserved("p2"), now=at(20))  # AUTHORIZING from 20 s: its deadline is 50 s
    assert saga(tick(ORDER), now=at(45)).outbound == ()
    out = saga(tick(ORDER), now=at(50)).outbound
    assert commands(out) == cancels("p1", "p2") + VOID
    assert saga.state.reason == "timeout"


def test_a_custom_step_timeout_is_honoured():
    saga = Driver(OrderSaga(step_timeout=timedelta(seconds=5)))
    saga(place())
    assert saga(tick(ORDER), now=at(5)).outbound != ()
    assert saga.state.status == "CANCELLED"


# --- customer cancel ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "compensations"),
    [
        ("PENDING", cancels("p1", "p2")),
        ("AUTHORIZING", cancels("p1", "p2") + VOID),
        ("CONFIRMING", cancels("p1", "p2") + VOID),
    ],
)
def test_a_customer_cancel_before_capture_cancels_the_order(status, compensations):
    saga = saga_in(status)
    out = saga(answer(oc.CancelOrder())).outbound
    assert commands(out) == compensations
    assert events(out) == [
        oc.OrderStatusChanged(status="CANCELLED", reason="cancelled by customer")
    ]


@pytest.mark.parametrize("status", ["CAPTURING", "CONFIRMED"])
def test_a_customer_cancel_once_capturing_is_refused(status):
    saga = saga_in(status)
    before = saga.state
    out = saga(answer(oc.CancelOrder())).outbound
    assert commands(out) == []
    assert events(out) == [oc.CancelRefused(status=status, reason=f"order is already {status}")]
    assert saga.state == before


def test_a_cancel_that_overtakes_its_placement_wins():
    # given a cancel for an order the saga has not seen yet
    saga = Driver(SAGA)
    out = saga(answer(oc.CancelOrder(reason="changed my mind"))).outbound
    assert commands(out) == []
    assert events(out) == [oc.OrderStatusChanged(status="CANCELLED", reason="changed my mind")]
    # when the placement arrives, then it is ignored: nothing reserved
    assert saga(place()).outbound == ()
    assert saga.state.status == "CANCELLED"
    assert saga.state.lines == ()


# --- duplicates, reordering, late and stray messages --------------------------------------


def test_a_redelivered_reply_changes_nothing():
    saga = saga_in("PENDING")
    reply = reserved("p1")
    saga(reply)
    before = saga.record
    result = saga(reply)
    assert result.duplicate and result.outbound == ()
    assert saga.record == before


def test_replies_in_any_order_authorize_exactly_once():
    saga = saga_in("PENDING")
    authorizes = []
    for env in [reserved("p2"), reserved("p1"), reserved("p2"), reserved("p1")]:
        authorizes += [c for c in commands(saga(env).outbound) if c[2] == "payment.Authorize"]
    assert authorizes == [("payment", ORDER, "payment.Authorize")]
    assert saga.state.status == "AUTHORIZING"


@pytest.mark.parametrize(
    "late",
    [
        reserved("p2"),
        confirmed("p1"),
        released("p1", "expired"),
        answer(AUTHORIZED),
        answer(pc.Declined(amount=Decimal(1), method="card", reason="no")),
        answer(pc.CaptureRefused(reason="payment is voided")),
    ],
)
def test_a_reply_for_a_finished_saga_changes_nothing_and_sends_nothing(late):
    saga = saga_in("PENDING")
    saga(rejected("p1"))
    before = saga.record
    result = saga(late)
    assert result.outbound == ()
    assert (saga.state, saga.record.sequence) == (before.state, before.sequence)


def test_a_second_placement_of_the_same_order_id_is_ignored():
    saga = saga_in("PENDING")
    before = saga.state
    out = saga(place(("p9", 5, "1.00"))).outbound
    assert out == ()
    assert saga.state == before


def test_replies_before_any_placement_are_ignored_and_store_nothing():
    saga = Driver(SAGA)
    result = saga(reserved("p1"))
    assert result.outbound == () and result.unchanged
    assert saga.record is None  # a stray reply leaves no key in the table


def test_an_order_id_containing_a_colon_still_matches_replies_to_lines():
    order = "shop:42"
    saga = Driver(SAGA)
    saga(place(order=order))
    saga(reserved("p1", order=order))
    out = saga(reserved("p2", order=order)).outbound
    assert commands(out) == [("payment", order, "payment.Authorize")]


def test_a_timeout_status_event_names_the_saga_although_a_tick_caused_it():
    saga = OrderSaga()
    place = oc.PlaceOrder(
        customer_id="c1",
        lines=(oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal("1.00")),),
        payment=oc.PaymentDetails(method="card"),
    )
    record = step(saga, None, envelope(place, key="o-9", saga_id="o-9"), at(0)).record
    result = step(saga, record, tick("o-9"), at(31))
    [event] = event_envelopes(result.outbound)
    assert (event.payload["status"], event.saga_id) == ("CANCELLED", "o-9")
