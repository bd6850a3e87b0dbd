"""The legacy system's change data capture (issue 10): its row changes correlated into
business events, which may drive the enrollment domain. No read model of its own: its
events feed saga timelines."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from sagas.contracts import legacy
from sagas.definitions.legacy_actions import ActionCorrelator
from sagas.definitions.legacy_correlator import LegacyCorrelator
from sagas.definitions.legacy_domain import LegacyDomain
from sagas.domains.enrollment import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.machinery.domain import Domain, ProcessChannel
from sagas.machinery.process import Process

LEGACY_TX, LEGACY_ACTIONS = "legacy-tx", "legacy-actions"
"""The legacy CDC correlator's two stages (issue 10): per source transaction (fed by the
worker's Debezium ingest edge), then per student or course
(sagas/definitions/legacy_correlator.py, legacy_actions.py)."""
LEGACY_DOMAIN = "legacy-domain"
"""The process that drives the enrollment domain from the business events
(SAGALINE_CDC_DRIVES_ENROLLMENT; sagas/definitions/legacy_domain.py)."""


class LegacySettings(Protocol):
    """The settings the legacy CDC domain's processes read."""

    @property
    def cdc_window_s(self) -> float: ...
    @property
    def cdc_retention_s(self) -> float: ...
    @property
    def cdc_drives_enrollment(self) -> bool: ...


def processes(settings: LegacySettings) -> list[Process[Any]]:
    """The correlator's two stages, then the process driving the enrollment domain (idle
    unless SAGALINE_CDC_DRIVES_ENROLLMENT: only then does the last stage send it the
    business events; otherwise they are published only as events).

    Stage 2 holds a part twice the window: the parts of one action whose transactions lie
    within a window of each other reach it up to two windows apart
    (sagas/definitions/legacy_actions.py, "Timing")."""
    window = timedelta(seconds=settings.cdc_window_s)
    retention = timedelta(seconds=settings.cdc_retention_s)
    return [
        LegacyCorrelator(
            window=window, actions=LEGACY_ACTIONS, retention=retention, name=LEGACY_TX
        ),
        ActionCorrelator(
            hold=2 * window,
            retention=retention,
            domain_channel=LEGACY_DOMAIN if settings.cdc_drives_enrollment else None,
            name=LEGACY_ACTIONS,
        ),
        LegacyDomain(
            name=LEGACY_DOMAIN, enrollments=ENROLLMENT_SAGA, courses=COURSE, students=STUDENT
        ),
    ]


DOMAIN = Domain(
    name="legacy",
    contracts=(legacy,),
    channels=(
        ProcessChannel(LEGACY_TX, LegacyCorrelator, cdc=True),
        ProcessChannel(LEGACY_ACTIONS, ActionCorrelator, cdc=True),
        ProcessChannel(LEGACY_DOMAIN, LegacyDomain, cdc=True),
    ),
    processes=processes,
)
