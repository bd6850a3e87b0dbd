"""Every domain that declares its traffic (``Domain.traffic``) keeps its own invariants when
that traffic runs through its real processes, answers delayed, reordered and timed out: the
rules the fault harness checks on the real stack hold on the pure core first."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sagas.domains import DOMAINS
from sagas.machinery.domain import Domain
from tests.spark.domains import drive

pytestmark = pytest.mark.unit
WITH_TRAFFIC = [d for d in DOMAINS if d.traffic is not None]


@pytest.mark.parametrize("domain", WITH_TRAFFIC, ids=lambda d: d.name)
@pytest.mark.parametrize("seed", range(4))
def test_the_sample_traffic_keeps_the_domain_s_invariants(domain: Domain[Any], seed: int) -> None:
    assert domain.traffic is not None
    events = drive(domain, domain.traffic, 200, random.Random(seed))
    assert len({e.key for e in events}) > 10, "the traffic made a history worth checking"
    assert domain.traffic.invariants(events) == []


@pytest.mark.parametrize("domain", WITH_TRAFFIC, ids=lambda d: d.name)
def test_the_invariants_see_an_event_lost(domain: Domain[Any]) -> None:
    """Drop one entity's last event: a rule must notice (they cannot pass on anything)."""
    assert domain.traffic is not None
    events = drive(domain, domain.traffic, 100, random.Random(7))
    last = {e.key: e for e in events}
    lost = next(e for e in reversed(events) if last[e.key] is e and e.sequence and e.sequence > 1)
    assert domain.traffic.invariants([e for e in events if e is not lost]) != []
