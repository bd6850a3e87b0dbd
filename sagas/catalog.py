"""Every process channel, read model and saga type, listed once: the rest iterates over these.

The projector, the Spark rebuild, the API's queries and waits, the analytics and the tests
take their models and saga statuses from here and from nowhere else. A new domain adds its
declarations to these tuples (see the README, "Adding a saga and its read models").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sagas.contracts  # noqa: F401  (registers every contract)
from sagas.contracts.system import Tick
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.legacy_actions import ActionCorrelator
from sagas.definitions.legacy_correlator import LegacyCorrelator
from sagas.definitions.legacy_domain import LegacyDomain
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Process
from sagas.messages import Message
from sagas.participants.course import CourseSeats
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway
from sagas.participants.student import StudentCredits
from sagas.projections.declare import ReadModel, SagaType
from sagas.projections.enrollments import ENROLLMENTS
from sagas.projections.orders import ORDERS
from sagas.projections.roster import COURSE_ROSTER
from sagas.projections.stock import PRODUCT_STOCK
from sagas.projections.students import STUDENT_ENROLLMENTS

ORDER_SAGA, INVENTORY, PAYMENT = "order-saga", "inventory", "payment"
ENROLLMENT_SAGA, COURSE, STUDENT = "enrollment-saga", "course", "student"
LEGACY_TX, LEGACY_ACTIONS = "legacy-tx", "legacy-actions"
"""The legacy CDC correlator's two stages (issue 10): per source transaction (fed by the
worker's Debezium ingest edge), then per student or course
(sagas/definitions/legacy_correlator.py, legacy_actions.py)."""
LEGACY_DOMAIN = "legacy-domain"
"""The process that drives the enrollment domain from the business events
(SAGALINE_CDC_DRIVES_ENROLLMENT; sagas/definitions/legacy_domain.py)."""


@dataclass(frozen=True)
class ProcessChannel:
    """A process's channel and the definition that listens on it: its topic carries the
    commands and replies the definition ``ACCEPTS`` (and ``system.Tick``), keyed by its
    ``KEY``; its ``FACTS`` go to the domain-event topic."""

    name: str
    definition: type[Process[Any]]
    cdc: bool = False
    """Fed only by the worker's Debezium ingest edge (through the correlator's stages): the
    worker runs it only with SAGALINE_CDC_ENABLED. Without CDC its topic stays empty, and a
    consumer of its partitions would cost every fetch of the worker's consumer for nothing
    (5-8 points of a core below full load: BENCHMARKS.md, "Issue 11, fifth step")."""

    @property
    def accepts(self) -> tuple[type[Message], ...]:
        return (*self.definition.ACCEPTS, Tick)

    @property
    def facts(self) -> tuple[type[Message], ...]:
        return self.definition.FACTS

    @property
    def key(self) -> str:
        return self.definition.KEY


CHANNELS: tuple[ProcessChannel, ...] = (
    ProcessChannel(ORDER_SAGA, OrderSaga),
    ProcessChannel(INVENTORY, CapacityLedger),
    ProcessChannel(PAYMENT, PaymentGateway),
    ProcessChannel(ENROLLMENT_SAGA, EnrollmentSaga),
    ProcessChannel(COURSE, CourseSeats),
    ProcessChannel(STUDENT, StudentCredits),
    ProcessChannel(LEGACY_TX, LegacyCorrelator, cdc=True),
    ProcessChannel(LEGACY_ACTIONS, ActionCorrelator, cdc=True),
    ProcessChannel(LEGACY_DOMAIN, LegacyDomain, cdc=True),
)
PROCESS_CHANNELS: tuple[str, ...] = tuple(c.name for c in CHANNELS)
"""The channel (topic and table) of every saga and participant process; the wiring
(``sagaline/wiring.py``) gives each process its name from here."""


def running_channels(cdc_enabled: bool) -> tuple[str, ...]:
    """The channels whose process the worker runs (SAGALINE_CDC_ENABLED: ``cdc_enabled``).
    Every channel's topic and changelog are declared either way (``sagaline topics create``
    runs before a worker is told to read Debezium)."""
    return tuple(c.name for c in CHANNELS if cdc_enabled or not c.cdc)


def channel(name: str) -> ProcessChannel | None:
    return next((c for c in CHANNELS if c.name == name), None)


def facts() -> tuple[type[Message], ...]:
    """Every fact on the domain-event topic, each once, in declaration order."""
    return tuple(dict.fromkeys(f for c in CHANNELS for f in c.facts))


READ_MODELS: tuple[ReadModel[Any], ...] = (
    ORDERS,
    PRODUCT_STOCK,
    ENROLLMENTS,
    COURSE_ROSTER,
    STUDENT_ENROLLMENTS,
)

SAGA_TYPES: tuple[SagaType, ...] = (
    SagaType(entity_type="order", statuses=OrderSaga.STATUSES, model=ORDERS),
    SagaType(entity_type="enrollment", statuses=EnrollmentSaga.STATUSES, model=ENROLLMENTS),
)

_BY_ENTITY = {m.entity_type: m for m in READ_MODELS}
assert len(_BY_ENTITY) == len(READ_MODELS), "one read model per entity type"
assert len({m.name for m in READ_MODELS}) == len(READ_MODELS), "read model names are unique"


def model_for(entity_type: str) -> ReadModel[Any] | None:
    """The read model folding the events of ``entity_type`` (None: the type has no row of
    its own; its events still feed saga timelines)."""
    return _BY_ENTITY.get(entity_type)


def saga_type_of(entity_type: str) -> SagaType | None:
    return next((s for s in SAGA_TYPES if s.entity_type == entity_type), None)


def saga_type(entity_type: str) -> SagaType:
    """The declared saga type of ``entity_type``; a KeyError names the missing declaration."""
    if (found := saga_type_of(entity_type)) is None:
        raise KeyError(f"no saga type for entity type {entity_type!r} in sagas.catalog")
    return found
