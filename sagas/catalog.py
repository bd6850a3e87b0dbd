"""Every process channel, read model and saga type, derived from the domains
(``sagas.domains.DOMAINS``): the rest iterates over these.

The projector, the Spark rebuild, the API's queries and waits, the analytics and the tests
take their models and saga statuses from here and from nowhere else. A new domain is
declared in its own module and registered in ``sagas.domains`` (see the README, "Adding a
saga and its read models"); nothing here changes.
"""

from __future__ import annotations

from typing import Any

from sagas.domains import DOMAINS
from sagas.domains.enrollment import COURSE as COURSE
from sagas.domains.enrollment import ENROLLMENT_SAGA as ENROLLMENT_SAGA
from sagas.domains.enrollment import STUDENT as STUDENT
from sagas.domains.legacy import LEGACY_ACTIONS as LEGACY_ACTIONS
from sagas.domains.legacy import LEGACY_DOMAIN as LEGACY_DOMAIN
from sagas.domains.legacy import LEGACY_TX as LEGACY_TX
from sagas.domains.orders import INVENTORY as INVENTORY
from sagas.domains.orders import ORDER_SAGA as ORDER_SAGA
from sagas.domains.orders import PAYMENT as PAYMENT
from sagas.machinery.domain import ProcessChannel as ProcessChannel
from sagas.messages import Message
from sagas.projections.declare import ReadModel, SagaType

CHANNELS: tuple[ProcessChannel, ...] = tuple(c for d in DOMAINS for c in d.channels)
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


READ_MODELS: tuple[ReadModel[Any], ...] = tuple(m for d in DOMAINS for m in d.read_models)

SAGA_TYPES: tuple[SagaType, ...] = tuple(s for d in DOMAINS for s in d.saga_types)

# One read model per entity type, names unique: sagas.domains checks it as it registers them.
_BY_ENTITY = {m.entity_type: m for m in READ_MODELS}


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
