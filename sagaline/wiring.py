"""Build the saga and participant definitions from settings: the one place they are configured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime.settings import Settings
from runtime.topics import INVENTORY, ORDER_SAGA, PAYMENT
from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Process
from sagas.participants.course import CourseSeats
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway, PaymentPolicy
from sagas.participants.student import StudentCredits


def build_processes(settings: Settings) -> list[Process[Any]]:
    saga = OrderSaga(
        name=ORDER_SAGA,
        inventory=INVENTORY,
        payments=PAYMENT,
        step_timeout=timedelta(seconds=settings.step_timeout_s),
        reservation_ttl=timedelta(seconds=settings.reservation_ttl_s),
    )
    retention = timedelta(seconds=settings.dedupe_retention_s)
    inventory = CapacityLedger(name=INVENTORY, entity_type="product", retention=retention)
    policy = PaymentPolicy(
        decline_methods=settings.decline_methods,
        max_amount=settings.payment_max_amount,
        silent_methods=settings.silent_methods,
    )
    # A seat hold expires like a stock reservation; a step times out like an order's.
    enrollment = EnrollmentSaga(
        name=ENROLLMENT_SAGA,
        courses=COURSE,
        students=STUDENT,
        step_timeout=timedelta(seconds=settings.step_timeout_s),
        seat_ttl=timedelta(seconds=settings.reservation_ttl_s),
    )
    return [
        saga,
        inventory,
        PaymentGateway(name=PAYMENT, policy=policy),
        enrollment,
        CourseSeats(name=COURSE, retention=retention),
        StudentCredits(name=STUDENT, retention=retention),
    ]
