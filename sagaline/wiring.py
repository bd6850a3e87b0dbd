"""Build the saga and participant definitions from settings: the one place they are configured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime.settings import Settings
from runtime.topics import INVENTORY, ORDER_SAGA, PAYMENT
from sagas.catalog import COURSE, ENROLLMENT_SAGA, LEGACY_DOMAIN, LEGACY_TX, STUDENT
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.legacy_correlator import LegacyCorrelator
from sagas.definitions.legacy_domain import LegacyDomain
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
    inventory = CapacityLedger(name=INVENTORY, entity_type="product")
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
    # The correlator and the legacy-domain process always run (idle without CDC input);
    # only with SAGALINE_CDC_DRIVES_ENROLLMENT does the correlator send them anything.
    correlator = LegacyCorrelator(
        window=timedelta(seconds=settings.cdc_window_s),
        domain_channel=LEGACY_DOMAIN if settings.cdc_drives_enrollment else None,
        name=LEGACY_TX,  # the channel the worker's ingest edge sends every change to
    )
    legacy_domain = LegacyDomain(
        name=LEGACY_DOMAIN, enrollments=ENROLLMENT_SAGA, courses=COURSE, students=STUDENT
    )
    return [
        saga,
        inventory,
        PaymentGateway(name=PAYMENT, policy=policy),
        enrollment,
        CourseSeats(name=COURSE),
        StudentCredits(name=STUDENT),
        correlator,
        legacy_domain,
    ]
