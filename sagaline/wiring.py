"""Build the saga and participant definitions from settings: the one place they are configured."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runtime.settings import Settings
from runtime.topics import INVENTORY, ORDER_SAGA, PAYMENT
from sagas.catalog import (
    COURSE,
    ENROLLMENT_SAGA,
    LEGACY_ACTIONS,
    LEGACY_DOMAIN,
    LEGACY_TX,
    STUDENT,
    running_channels,
)
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.legacy_actions import ActionCorrelator
from sagas.definitions.legacy_correlator import LegacyCorrelator
from sagas.definitions.legacy_domain import LegacyDomain
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Process
from sagas.participants.course import CourseSeats
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway, PaymentPolicy
from sagas.participants.student import StudentCredits


def build_processes(settings: Settings) -> list[Process[Any]]:
    """Every process the worker runs: the legacy CDC correlator's only with
    SAGALINE_CDC_ENABLED (``sagas.catalog.running_channels``)."""
    running = set(running_channels(settings.cdc_enabled))
    return [p for p in _every_process(settings) if p.name in running]


def _every_process(settings: Settings) -> list[Process[Any]]:
    # The legacy CDC correlator's last stage also sends its business events into the
    # enrollment domain when told to (None: published only as events).
    domain_channel = LEGACY_DOMAIN if settings.cdc_drives_enrollment else None
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
        *build_legacy_correlator(settings, domain_channel=domain_channel),
        # Runs with CDC (idle unless SAGALINE_CDC_DRIVES_ENROLLMENT: only then does the
        # correlator's last stage send it the business events).
        LegacyDomain(
            name=LEGACY_DOMAIN, enrollments=ENROLLMENT_SAGA, courses=COURSE, students=STUDENT
        ),
    ]


def build_legacy_correlator(
    settings: Settings, *, domain_channel: str | None = None
) -> list[Process[Any]]:
    """The legacy CDC correlator's two stages. Stage 2 holds a part twice the window: the
    parts of one action whose transactions lie within a window of each other reach it up to
    two windows apart (sagas/definitions/legacy_actions.py, "Timing")."""
    window = timedelta(seconds=settings.cdc_window_s)
    retention = timedelta(seconds=settings.cdc_retention_s)
    return [
        LegacyCorrelator(
            window=window, actions=LEGACY_ACTIONS, retention=retention, name=LEGACY_TX
        ),
        ActionCorrelator(
            hold=2 * window,
            retention=retention,
            domain_channel=domain_channel,
            name=LEGACY_ACTIONS,
        ),
    ]
