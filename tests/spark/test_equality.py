"""The rebuild equals the online projector, table for table, on the real broker.

A mixed history -- orders confirmed, rejected, cancelled, expired, declined and in flight;
enrollments played by the real definitions (waitlists, promotions, drops, transfers accepted
and refused, timeouts); the legacy CDC business events and the enrollments they drive
(``tests/spark/legacy.py``: known types no model folds); duplicates, an entity's events
written out of order and late, gaps that never fill, malformed records of every kind,
loosely written events and a type from a newer producer -- goes to an isolated topic. The
real projector (small batches) projects it into one fresh database, ``sagaline rebuild``'s
job into another; every projector table (every declared read model's,
:data:`sagas.catalog.READ_MODELS`, and the kernel's) must hold the same rows (the two
wall-clock columns aside), and the rebuild's rejects must be exactly what the projector
dead-lettered, with the same reasons.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from sqlalchemy import select

from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, create_topics
from sagas.catalog import READ_MODELS
from services.projector.runner import Projector
from services.worker.deadletter import DeadLetter
from spark_projections import tables
from spark_projections.job import run
from tests.integration.harness import broker_reachable, isolated_settings, read_all
from tests.integration.readside import (
    BACKENDS,
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)
from tests.spark import domains, enrollments, history, legacy

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def mixed_history() -> list[tuple[bytes | None, bytes | None]]:
    events = history.with_gaps(history.order_history(400, products=8, seed=17, days=2))
    sample = next(e for e in events if e.type == "order.StatusChanged" and e.sequence == 2)
    return [
        *history.encoded(history.messy(events, seed=18)),
        *history.encoded(enrollments.messy_enrollments(400, seed=19)),
        *history.encoded(legacy.legacy_history()),
        *history.encoded(history.messy(domains.traffic_history(), 31, domains.traffic_entities())),
        *history.malformed(sample),
        *history.lax_order(),
        *enrollments.lax_course(),
    ]


async def project(settings: Settings, url: str, ends: dict[int, int]) -> None:
    """The real projector, in this process, until its checkpoints reach ``ends``."""
    with read_engine(url) as engine:
        stop = asyncio.Event()
        task = asyncio.create_task(Projector(settings, engine).run(stop))
        try:
            await wait_until_applied(engine, settings.topic(EVENTS), ends, timeout=120)
        finally:
            stop.set()
            await task


def rejects(url: str) -> set[tuple[int, int, str]]:
    t = tables.rebuild_rejects
    with read_engine(url) as engine, engine.connect() as conn:
        return {
            (p, o, r) for p, o, r in conn.execute(select(t.c.partition, t.c.offset, t.c.reason))
        }


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_rebuild_holds_exactly_the_projectors_rows(
    backend: str, tmp_path: Path, spark: SparkSession
) -> None:
    assert broker_reachable(), "no Kafka broker: run deploy/local/kafka.sh start"
    settings = isolated_settings(tmp_path, log_level="WARNING", projector_batch_size=97)
    await create_topics(settings)
    ends = await produce(settings, mixed_history())
    with fresh_database(backend, tmp_path) as online, fresh_database(backend, tmp_path) as rebuilt:
        await project(settings, online, ends)
        lines: list[str] = []
        target = settings.model_copy(update={"database_url": rebuilt})
        summary = await asyncio.to_thread(run, target, emit=lines.append, spark=spark)
        with read_engine(online) as a, read_engine(rebuilt) as b:
            projected, rebuilt_rows = snapshot(a), snapshot(b)
        dead = [DeadLetter.decode(r.value) for r in await read_all(settings, DEAD_LETTERS)]
        assert rejects(rebuilt) == {(d["partition"], d["offset"], d["reason"]) for d in dead}
        # The legacy business events are known types no model folds: never dead-lettered.
        assert not [d for d in dead if (d.get("key") or "").startswith("legacy")]
    for table, rows in projected.items():
        assert rebuilt_rows[table] == rows, table
    for model in READ_MODELS:  # every declared model is compared, on rows that prove something
        assert projected[model.name], f"the history gives {model.name} no row"
    assert summary.events_read == sum(ends.values())
    assert summary.verdicts["held"] > 0 and summary.verdicts["duplicate"] > 0
    assert any(line.startswith("stage=stage") and "rows_written=" in line for line in lines)
    assert any(line.startswith("summary rows orders=") for line in lines)
