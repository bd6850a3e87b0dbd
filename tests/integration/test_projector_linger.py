"""The projector's linger on the real broker: below full load it applies fewer, larger
transactions (SAGALINE_PROJECTOR_LINGER_MS), and every event all the same.

The same events reach two projectors (two groups, two fresh databases) as a trickle: one
reads again at once, the other lingers. Both must come out equal to each other; the one
that lingers must have needed a fraction of the other's transactions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import Engine

from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from services.projector.runner import Projector
from tests.integration.golden import golden_events
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import (
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

LINGER_MS = 500
TRICKLE = 10  # events a send
PAUSE_S = 0.05  # between sends: ~200 events a second, a few per fetch without a linger


async def test_a_lingering_projector_applies_a_trickle_in_fewer_transactions(
    tmp_path: Path,
) -> None:
    assert broker_reachable(), "no Kafka broker: start it with `deploy/local/kafka.sh start`"
    settings = isolated_settings(tmp_path)
    await create_topics(settings)
    events = golden_events(orders=60, products=4)
    with (
        fresh_database("sqlite", tmp_path) as eager_url,
        fresh_database("sqlite", tmp_path) as lingering_url,
        read_engine(eager_url) as eager_db,
        read_engine(lingering_url) as lingering_db,
    ):
        eager = _projector(settings, eager_url, "eager", linger_ms=0, engine=eager_db)
        lingering = _projector(
            settings, lingering_url, "lingering", linger_ms=LINGER_MS, engine=lingering_db
        )
        stop = asyncio.Event()
        tasks = [asyncio.create_task(p.run(stop)) for p in (eager, lingering)]
        topic = settings.topic(EVENTS)
        try:
            # The first send applied by both: each owns its partitions before the trickle.
            ends = await produce(settings, events[:TRICKLE])
            await wait_until_applied(eager_db, topic, ends, timeout=60)
            await wait_until_applied(lingering_db, topic, ends, timeout=60)
            counted = _batches(lingering), _batches(eager)
            for i in range(TRICKLE, len(events), TRICKLE):
                sent = await produce(settings, events[i : i + TRICKLE])
                ends.update({p: max(ends.get(p, 0), end) for p, end in sent.items()})
                await asyncio.sleep(PAUSE_S)
            await wait_until_applied(eager_db, topic, ends, timeout=60)
            await wait_until_applied(lingering_db, topic, ends, timeout=60)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert snapshot(lingering_db) == snapshot(eager_db)
        applied = eager.totals["applied"]
        assert applied == lingering.totals["applied"] == len(events)
        few, many = _batches(lingering) - counted[0], _batches(eager) - counted[1]
        assert few * 3 <= many, f"{few} transactions lingering against {many} without"


def _projector(
    settings: Settings, url: str, name: str, linger_ms: int, engine: Engine
) -> Projector:
    values = {
        "database_url": url,
        "app_id": f"{settings.app_id}-{name}",
        "projector_linger_ms": linger_ms,
        "projector_metrics_port": 0,
    }
    return Projector(settings.model_copy(update=values), engine)


def _batches(projector: Projector) -> float:
    value = projector.prom.registry.get_sample_value("sagaline_projector_batches_total")
    assert value is not None
    return value
