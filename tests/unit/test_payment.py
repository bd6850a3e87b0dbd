"""The payment participant: authorize / capture / void against a simulated gateway."""

from decimal import Decimal

import pytest

from sagas.contracts import payment as pc
from sagas.messages import Envelope, Message
from sagas.participants.payment import PaymentGateway

from .helpers import Driver, commands, envelope, events, sent

pytestmark = pytest.mark.unit

ORDER = "o-1"


def command(message: Message) -> Envelope:
    return envelope(message, key=ORDER, saga_id=ORDER, reply_to="order-saga")


def authorize(amount: str = "25.50", method: str = "card") -> Envelope:
    return command(pc.Authorize(amount=Decimal(amount), method=method))


def gateway() -> Driver:
    return Driver(PaymentGateway())


def authorized() -> Driver:
    payment = gateway()
    payment(authorize())
    return payment


def test_authorize_answers_the_saga_and_records_the_fact():
    payment = gateway()
    result = payment(authorize("25.50", "card"))
    fact = pc.Authorized(amount=Decimal("25.50"), method="card")
    assert commands(result.outbound) == [("order-saga", ORDER, "payment.Authorized")]
    assert sent(result.outbound) == [fact]
    assert events(result.outbound) == [fact]
    assert payment.state.status == "AUTHORIZED"


def test_a_declining_method_is_declined():
    payment = gateway()
    [answer] = sent(payment(authorize(method="decline")).outbound)
    assert isinstance(answer, pc.Declined)
    assert "decline" in answer.reason
    assert payment.state.status == "DECLINED"


def test_an_amount_over_the_limit_is_declined_and_the_limit_itself_is_not():
    over = gateway()
    [answer] = sent(over(authorize(amount="10000.01")).outbound)
    assert isinstance(answer, pc.Declined)
    assert answer.reason == "amount 10000.01 exceeds the limit of 10000"
    at_limit = gateway()
    assert [type(m) for m in sent(at_limit(authorize(amount="10000")).outbound)] == [pc.Authorized]


def test_capture_after_authorize_captures_the_authorized_amount():
    payment = authorized()
    result = payment(command(pc.Capture()))
    assert sent(result.outbound) == [pc.Captured(amount=Decimal("25.50"))]
    assert payment.state.status == "CAPTURED"


def test_capture_without_an_authorization_is_refused():
    payment = gateway()
    result = payment(command(pc.Capture()))
    assert sent(result.outbound) == [pc.CaptureRefused(reason="payment is new")]
    assert events(result.outbound) == []
    assert payment.record is None  # nothing stored: the payment is still unknown


def test_capture_of_a_declined_payment_is_refused():
    payment = gateway()
    payment(authorize(method="decline"))
    [answer] = sent(payment(command(pc.Capture())).outbound)
    assert answer == pc.CaptureRefused(reason="payment is declined")


def test_void_after_authorize_voids_without_refund():
    payment = authorized()
    result = payment(command(pc.Void()))
    assert sent(result.outbound) == [pc.Voided(amount=Decimal("25.50"), refunded=False)]
    assert payment.state.status == "VOIDED"


def test_void_after_capture_refunds():
    payment = authorized()
    payment(command(pc.Capture()))
    result = payment(command(pc.Void()))
    assert sent(result.outbound) == [pc.Voided(amount=Decimal("25.50"), refunded=True)]
    assert payment.state.status == "REFUNDED"


def test_a_void_before_its_authorize_makes_the_late_authorize_decline():
    # given a void that overtook its authorize (the saga timed out)
    payment = gateway()
    assert payment(command(pc.Void())).outbound == ()
    # when the authorize arrives, then it is declined and no money is held
    result = payment(authorize())
    [answer] = sent(result.outbound)
    assert isinstance(answer, pc.Declined)
    assert answer.reason == "payment is voided"
    assert events(result.outbound) == []
    assert payment.state.status == "VOIDED"


def test_a_repeated_authorize_re_answers_the_same_fact_without_a_second_event():
    payment = authorized()
    result = payment(authorize())  # a new message id: not a transport duplicate
    assert sent(result.outbound) == [pc.Authorized(amount=Decimal("25.50"), method="card")]
    assert events(result.outbound) == []
    assert payment.record.sequence == 1


def test_a_repeated_capture_re_answers_captured_without_a_second_event():
    payment = authorized()
    payment(command(pc.Capture()))
    result = payment(command(pc.Capture()))
    assert sent(result.outbound) == [pc.Captured(amount=Decimal("25.50"))]
    assert events(result.outbound) == []
