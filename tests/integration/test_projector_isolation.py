"""An event the database refuses is isolated, on PostgreSQL and SQLite: the rest of its batch
is applied, its sequence counts, and a database that does not answer blames no event.

The refusal is a trigger the test adds (``orders.order_id = 'o003'`` is refused): a
stand-in for any value the column checks in ``readside/limits.py`` did not
foresee. No Kafka here: the batch goes straight to :mod:`services.projector.isolation`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from readside import queries, store
from readside.batch import Batch, apply_batch
from readside.triage import Positioned
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, create_topics
from sagas.projections.orders import ORDERS
from services.projector.isolation import REFUSED_TYPE, refused, trial, without
from services.projector.runner import Projector
from services.worker.deadletter import DeadLetter
from tests.integration.golden import T0, expected_rows, golden_events
from tests.integration.harness import broker_reachable, isolated_settings, read_all
from tests.integration.readside import (
    BACKENDS,
    PG_URL,
    fresh_database,
    produce,
    read_engine,
    wait_until_applied,
)

pytestmark = pytest.mark.integration

POISONED = "o003"
TRIGGERS = {
    "postgresql": [
        """CREATE FUNCTION refuse_poisoned() RETURNS trigger AS $$
           BEGIN
             IF NEW.order_id = 'o003' THEN RAISE EXCEPTION 'order o003 is poisoned'; END IF;
             RETURN NEW;
           END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER refuse_poisoned BEFORE INSERT OR UPDATE ON orders
           FOR EACH ROW EXECUTE FUNCTION refuse_poisoned()""",
    ],
    "sqlite": [
        """CREATE TRIGGER refuse_poisoned BEFORE INSERT ON orders
           WHEN NEW.order_id = 'o003'
           BEGIN SELECT RAISE(ABORT, 'order o003 is poisoned'); END""",
    ],
}


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with fresh_database(request.param, tmp_path) as url, read_engine(url) as engine:
        with engine.begin() as conn:
            for statement in TRIGGERS[request.param]:
                conn.execute(text(statement))
        yield engine


def _batch() -> Batch:
    events = golden_events(orders=12, products=3)
    positioned = [Positioned(e, 0, offset) for offset, e in enumerate(events)]
    return Batch("t.events", positioned, {0: len(events)})


def test_the_refused_event_is_found_and_the_rest_of_the_batch_is_applied(engine: Engine) -> None:
    batch = _batch()
    with pytest.raises(Exception, match="poisoned"):
        trial(engine, batch)  # the whole batch fails, every time
    # when the batch is bisected
    found = refused(engine, batch)
    # then exactly the event that creates the poisoned order's row is blamed, with the error
    [culprit] = found
    assert (culprit.where.event.key, culprit.where.event.sequence) == (f"order:{POISONED}", 1)
    assert culprit.where.event.type == "order.Placed"
    assert culprit.reason.startswith("the read-model database refused it: ")
    assert "order o003 is poisoned" in culprit.reason and "\n" not in culprit.reason
    # and the rest applies, the refused event's sequence counting as consumed
    with engine.begin() as conn:
        applied = apply_batch(conn, without(batch, found), T0)
    expected = expected_rows(p.event for p in batch.events)
    with engine.connect() as conn:
        orders = store.load_rows(conn, ORDERS, list(expected.orders))
        positions = store.load_positions(conn, list(expected.positions))
        held = queries.held_events(conn).count
        checkpoints = store.load_checkpoints(conn, "t.events")
    assert set(orders) == set(expected.orders) - {POISONED}
    assert all(orders[o] == row for o, row in expected.orders.items() if o != POISONED)
    assert positions == expected.positions  # o003's later events were not held behind it
    assert held == 0 and checkpoints == {0: len(batch.events)}
    assert applied.unknown == {}  # the placeholder is not reported as an unknown type
    assert REFUSED_TYPE not in {p.event.type for p in batch.events}


def test_a_batch_the_database_takes_blames_nothing(engine: Engine) -> None:
    events = [p for p in _batch().events if p.event.key != f"order:{POISONED}"]
    batch = Batch("t.events", events, {0: 100})
    assert refused(engine, batch) == []


# --- the projector on the real broker ---------------------------------------------------------


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    assert broker_reachable(), "no Kafka broker: start it with `deploy/local/kafka.sh start`"
    return isolated_settings(tmp_path, projector_batch_size=500)


@asynccontextmanager
async def _projector(settings: Settings, engine: Engine) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(Projector(settings, engine).run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def _letters(settings: Settings) -> list[dict[str, Any]]:
    return [DeadLetter.decode(r.value) for r in await read_all(settings, DEAD_LETTERS)]


async def test_the_projector_dead_letters_what_the_database_refuses_and_goes_on(
    engine: Engine, settings: Settings
) -> None:
    await create_topics(settings)
    events = golden_events(orders=12, products=3)
    ends = await produce(settings, events)
    settings = settings.model_copy(update={"database_url": engine.url.render_as_string(False)})
    async with _projector(settings, engine) as task:
        await wait_until_applied(engine, settings.topic(EVENTS), ends)
        assert not task.done()
    [letter] = await _letters(settings)
    assert "order o003 is poisoned" in letter["reason"] and letter["stage"] == "projector"
    placed = next(e for e in events if e.key == f"order:{POISONED}" and e.sequence == 1)
    assert letter["value"] == placed.encode().decode()
    expected = expected_rows(events)
    with engine.connect() as conn:
        orders = store.load_rows(conn, ORDERS, list(expected.orders))
        counters = queries.counters(conn)
    assert set(orders) == set(expected.orders) - {POISONED}
    assert counters["dead_lettered"] == 1 and counters.get("unknown_type", 0) == 0


async def test_a_database_that_does_not_answer_is_waited_for_not_blamed(
    settings: Settings, tmp_path: Path
) -> None:
    await create_topics(settings)
    events = golden_events(orders=10, products=2)
    first, second = events[: len(events) // 2], events[len(events) // 2 :]
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        settings = settings.model_copy(update={"database_url": url})
        name = make_url(url).database
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        try:
            async with _projector(settings, engine) as task:
                await wait_until_applied(
                    engine, settings.topic(EVENTS), await produce(settings, first)
                )
                with admin.connect() as conn:  # the database goes away
                    conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :name AND pid <> pg_backend_pid()"
                        ),
                        {"name": name},
                    )
                ends = await produce(settings, second)
                await asyncio.sleep(4)  # several failed attempts, with backoff
                assert not task.done()
                with admin.connect() as conn:  # and comes back
                    conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
                await wait_until_applied(engine, settings.topic(EVENTS), ends, timeout=90)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            admin.dispose()
        expected = expected_rows(events)
        with engine.connect() as conn:
            assert store.load_rows(conn, ORDERS, list(expected.orders)) == expected.orders
            assert store.load_positions(conn, list(expected.positions)) == expected.positions
    assert await _letters(settings) == []
