"""The read side's retention (readside/retention.py) on an SQLite file: a saga final since
before the cutoff loses its row, its timeline and its own streams' positions; everything
else stays, whatever the batch size."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, text

from readside import codec, retention, schema
from readside.batch import Batch, apply_batch
from readside.triage import Positioned
from sagas.catalog import saga_type
from sagas.messages import Envelope
from tests.integration.readside import fresh_database, read_engine, snapshot
from tests.spark.history import T0, order_history

pytestmark = pytest.mark.unit
ORDER = saga_type("order")
CUTOFF = T0 + timedelta(days=1)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with fresh_database("sqlite", tmp_path) as url, read_engine(url) as engine:
        yield engine


def project(engine: Engine, events: list[Envelope]) -> None:
    batch = Batch("t", [Positioned(e, 0, o) for o, e in enumerate(events)], {0: len(events)})
    with engine.begin() as conn:
        apply_batch(conn, batch, T0)


def orders(engine: Engine) -> dict[str, tuple[str, datetime]]:
    t = schema.table_of(ORDER.model)
    with engine.connect() as conn:
        rows = conn.execute(select(t.c.order_id, t.c.status, t.c.updated_at))
        return {i: (s, codec.utc(u)) for i, s, u in rows}


def expired_ids(before: dict[str, tuple[str, datetime]]) -> set[str]:
    return {i for i, (s, u) in before.items() if ORDER.is_final(s) and u < CUTOFF}


@pytest.fixture
def history(engine: Engine) -> dict[str, tuple[str, datetime]]:
    project(engine, order_history(120, products=4, seed=3, days=2))
    before = orders(engine)
    # The history must hold each kind this file is about.
    assert expired_ids(before)
    assert {i for i, (s, u) in before.items() if ORDER.is_final(s) and u >= CUTOFF}
    assert {i for i, (s, _) in before.items() if not ORDER.is_final(s)}
    return before


def without(rows: list[tuple[Any, ...]], gone: set[Any], at: int) -> list[tuple[Any, ...]]:
    return [r for r in rows if r[at] not in gone]


@pytest.mark.parametrize("batch", [7, 1000])
def test_a_saga_final_before_the_cutoff_loses_its_row_timeline_and_own_positions(
    engine: Engine, history: dict[str, tuple[str, datetime]], batch: int
) -> None:
    gone = expired_ids(history)
    own = {f"{kind}:{i}" for i in gone for kind in ("order", "payment")}
    before = snapshot(engine)
    pruned = retention.prune_sagas(engine, CUTOFF, batch, sagas=[ORDER])
    after = snapshot(engine)
    assert (pruned.sagas, pruned.more) == (len(gone), False)
    assert after["orders"] == without(before["orders"], gone, 0)
    assert after["saga_timeline"] == without(before["saga_timeline"], gone, 0)
    assert after["entity_positions"] == without(before["entity_positions"], own, 0)
    assert pruned.timeline == len(before["saga_timeline"]) - len(after["saga_timeline"])
    assert pruned.positions == len(own & {r[0] for r in before["entity_positions"]}) > 0
    # Products are shared by many sagas: their rows and positions stay.
    assert after["product_stock"] == before["product_stock"]
    assert {r[0] for r in after["entity_positions"] if r[0].startswith("product:")} == {
        r[0] for r in before["entity_positions"] if r[0].startswith("product:")
    }
    assert retention.prune_sagas(engine, CUTOFF, batch, sagas=[ORDER]).sagas == 0


def test_a_prune_stops_at_its_batch_limit_and_says_that_more_is_left(
    engine: Engine, history: dict[str, tuple[str, datetime]]
) -> None:
    gone = expired_ids(history)
    first = retention.prune_sagas(engine, CUTOFF, 5, max_batches=2, sagas=[ORDER])
    assert (first.sagas, first.more) == (10, True)
    assert len(orders(engine)) == len(history) - 10
    rest = retention.prune_sagas(engine, CUTOFF, 5, sagas=[ORDER])
    assert (rest.sagas, rest.more) == (len(gone) - 10, False)
    assert set(orders(engine)) == set(history) - gone


def test_the_same_rule_prunes_tables_under_other_names(
    engine: Engine, history: dict[str, tuple[str, datetime]]
) -> None:
    copied = (schema.saga_timeline, schema.entity_positions, schema.table_of(ORDER.model))
    with engine.begin() as conn:
        for t in copied:
            conn.execute(text(f"CREATE TABLE {t.name}__copy AS SELECT * FROM {t.name}"))
    as_copies = retention.named(lambda t: f"{t.name}__copy")
    pruned = retention.prune_sagas(engine, CUTOFF, 50, tables=as_copies, sagas=[ORDER])
    live = retention.prune_sagas(engine, CUTOFF, 50, sagas=[ORDER])
    assert (pruned.sagas, pruned.timeline, pruned.positions) == (
        live.sagas,
        live.timeline,
        live.positions,
    )
    with engine.connect() as conn:
        for t in copied:
            mine = conn.execute(text(f"SELECT * FROM {t.name}__copy")).all()
            live_rows = conn.execute(text(f"SELECT * FROM {t.name}")).all()
            assert sorted(mine) == sorted(live_rows), t.name


def test_receipts_go_in_bounded_batches(engine: Engine) -> None:
    project(engine, order_history(30, products=2, seed=5, days=1))
    with engine.connect() as conn:
        receipts = conn.execute(select(schema.command_receipts.c.command_id)).all()
    assert len(receipts) > 7
    later = T0 + timedelta(seconds=1)  # every receipt was applied at T0
    assert retention.prune_receipts(engine, later, batch=3, max_batches=2) == 6
    assert retention.prune_receipts(engine, T0, batch=3, max_batches=100) == 0
    assert retention.prune_receipts(engine, later, batch=3, max_batches=100) == len(receipts) - 6


def test_own_streams_are_those_keyed_by_the_saga_id() -> None:
    keys = ["order:o-1", "payment:o-1", "product:p-1", "order:o-10"]
    assert retention.own_streams("o-1", keys) == {"order:o-1", "payment:o-1"}
