"""The projector prunes finished sagas on its own, on PostgreSQL and SQLite: with a short
SAGALINE_READ_RETENTION_S, a history whose sagas finished long ago keeps only its sagas in
flight, its products, and their positions, while the projector goes on applying."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from readside import schema
from runtime.topics import EVENTS, create_topics
from sagas.catalog import saga_type
from services.projector.runner import Projector
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import (
    BACKENDS,
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)
from tests.spark.history import order_history

pytestmark = pytest.mark.integration
ORDER = saga_type("order")


def in_flight(engine: Engine) -> set[str]:
    t = schema.table_of(ORDER.model)
    with engine.connect() as conn:
        rows = conn.execute(select(t.c.order_id, t.c.status)).all()
    return {i for i, s in rows if not ORDER.is_final(s)}


async def until_pruned(engine: Engine, timeout: float) -> dict[str, list[tuple[object, ...]]]:
    """A snapshot once the orders table holds no final saga any more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await asyncio.to_thread(snapshot, engine)
        if len(rows["orders"]) == len(in_flight(engine)):
            return rows
        await asyncio.sleep(0.5)
    raise AssertionError(f"final sagas still there after {timeout} s")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_projector_deletes_the_rows_of_sagas_final_past_the_retention(
    backend: str, tmp_path: Path
) -> None:
    assert broker_reachable(), "no Kafka broker: run deploy/local/kafka.sh start"
    # Every saga of this history finished in 2024: far past a minute's retention.
    settings = isolated_settings(tmp_path, log_level="WARNING", read_retention_s=60.0)
    await create_topics(settings)
    events = order_history(300, products=5, seed=11, days=1)
    ends = await produce(settings, events)
    with fresh_database(backend, tmp_path) as url, read_engine(url) as engine:
        stop = asyncio.Event()
        task = asyncio.create_task(Projector(settings, engine).run(stop))
        try:
            await wait_until_applied(engine, settings.topic(EVENTS), ends, timeout=120)
            rows = await until_pruned(engine, timeout=60)
        finally:
            stop.set()
            await task
        flying = in_flight(engine)
    assert flying, "the history keeps some sagas in flight"
    assert {r[0] for r in rows["orders"]} == flying
    assert {r[0] for r in rows["saga_timeline"]} == flying
    positions = {r[0] for r in rows["entity_positions"]}
    assert {k for k in positions if not k.startswith("product:")} <= {
        f"{kind}:{i}" for i in flying for kind in ("order", "payment")
    }
    assert {k for k in positions if k.startswith("product:")} == {
        e.key for e in events if e.key.startswith("product:")
    }
    assert len(rows["product_stock"]) == 5
