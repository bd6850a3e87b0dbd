"""A cancel's dry run (services/operator/plans.py) is what the saga's own definition sends
when its cancel arrives: an order driven by real answers to each status is cancelled for
real, and the plan made from its read-model row alone names the same commands."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from runtime.settings import Settings
from sagas.contracts import orders as oc
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.order_saga import OrderSaga
from services.operator.cancels import CANCELLATIONS, NotCancellable, cancellation
from services.operator.definitions import definitions
from services.operator.plans import plan_cancel
from tests.unit.helpers import sent
from tests.unit.test_order_saga import LINES, ORDER, answer, saga_in

from .test_console_sagas import enrollment, order

pytestmark = pytest.mark.unit
NOW = datetime.now(UTC)


def order_row(status: str) -> Any:
    lines = tuple(
        oc.OrderLine(product_id=p, quantity=q, unit_price=Decimal(u)) for p, q, u in LINES
    )
    return order(ORDER, status, NOW, customer="c1").model_copy(update={"lines": lines})


@pytest.mark.parametrize(
    "status", ["PENDING", "AUTHORIZING", "CONFIRMING", "CAPTURING", "CONFIRMED"]
)
def test_an_orders_plan_is_what_its_definition_sends_on_the_cancel(status: str) -> None:
    driven = saga_in(status)
    real = driven(answer(oc.CancelOrder(reason="ops"))).outbound
    plan = plan_cancel(
        OrderSaga(), cancellation("order"), ORDER, order_row(status), status, "ops", NOW
    )
    planned = [(c.channel, c.key, c.type, c.payload) for c in plan.commands]
    expected = [
        (o.channel, o.envelope.key, o.envelope.type, o.envelope.payload)
        for o in real
        if o.envelope.type != oc.OrderStatusChanged.TYPE and o.channel != "events"
    ]
    assert planned == expected
    assert all(c.certain for c in plan.commands)
    assert plan.touched == bool(sent(real))
    assert plan.settles_in == (driven.state.status if plan.touched else status)


def test_a_status_several_steps_share_marks_what_only_a_later_step_sends() -> None:
    plan = plan_cancel(
        EnrollmentSaga(), cancellation("enrollment"), "e-1", enrollment("e-1", "PENDING", NOW),
        "PENDING", "ops", NOW,
    )  # fmt: skip
    assert [(c.type, c.certain) for c in plan.commands] == [
        ("course.ReleaseSeat", True),
        ("student.ReleaseCredits", False),
    ]
    assert plan.settles_in == "DROPPED" and "shared by 3 steps" in plan.note


def test_a_status_the_first_flow_never_reaches_is_left_to_the_saga() -> None:
    row = enrollment("e-1", "TRANSFERRING", NOW)
    plan = plan_cancel(
        EnrollmentSaga(), cancellation("enrollment"), "e-1", row, "TRANSFERRING", "ops", NOW
    )
    assert plan.touched and plan.commands == () and plan.settles_in is None


def test_only_kit_saga_types_declare_a_cancel() -> None:
    # A saga type may declare none: an operator cannot cancel it then.
    assert CANCELLATIONS and set(CANCELLATIONS) <= set(definitions(Settings()))
    # A participant's entity type is no saga type (a transfer saga will be one).
    with pytest.raises(NotCancellable, match="cannot cancel a payment saga"):
        cancellation("payment")
