"""An event the database refuses is isolated, on PostgreSQL and SQLite: the rest of its batch
is applied, its sequence counts, and a database that does not answer blames no event.

The refusal is a trigger the test adds (``orders.order_id = 'o003'`` is refused): a
stand-in for any value the column checks in ``services/readmodels/limits.py`` did not
foresee. No Kafka here: the batch goes straight to :mod:`services.projector.isolation`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from services.projector.batch import Batch, apply_batch
from services.projector.isolation import REFUSED_TYPE, refused, trial, without
from services.projector.triage import Positioned
from services.readmodels import queries, store
from tests.integration.golden import T0, expected_rows, golden_events
from tests.integration.readside import BACKENDS, fresh_database, read_engine

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
        orders = store.load_orders(conn, list(expected.orders))
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
