"""Each native read-model rule against the pure Python fold it re-expresses, on a messy history
(orders, and enrollments played by the real definitions): duplicates, entities written out
of order and late, gaps that never fill, malformed records, loosely written events (exact
route) and a type from a newer producer.

Every declared read model (:data:`sagas.catalog.READ_MODELS`) is compared: its native twin
(its declaration, interpreted by :mod:`spark_projections.twins`) against its fold. The
expected DataFrames are the folds' rows in their stored form (the projector's own
``codec``), compared whole with ``assertDataFrameEqual``; a twin that disagrees with its
fold, or that cannot be computed, fails the comparison (shown below on models declared
here, outside the catalog).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from pyspark.errors import PySparkAssertionError
from pyspark.sql import DataFrame, SparkSession

from readside import codec, schema
from sagas.catalog import READ_MODELS
from sagas.contracts.orders import OrderPlaced
from sagas.machinery.frozen import checked_copy
from sagas.messages import Envelope
from sagas.projections.declare import Column, Latest, ReadModel
from sagas.projections.orders import ORDERS
from spark_projections import gate, models, pipeline, swap, tables, twins
from tests.spark import domains, enrollments, history
from tests.spark.compare import assertDataFrameEqual, compare
from tests.spark.frames import T_LOG, place, records_frame
from tests.spark.reference import Record, Reference, project

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def records() -> list[Record]:
    events = history.with_gaps(history.order_history(120, products=6, seed=3))
    messy = history.messy(events, seed=4)
    sample = next(e for e in events if e.type == "order.StatusChanged" and e.sequence == 2)
    enrolling = enrollments.messy_enrollments(150, seed=7)
    declared = history.messy(domains.traffic_history(60), 8, domains.traffic_entities())
    raws = [
        *history.encoded(messy),
        *history.encoded(enrolling),
        *history.encoded(declared),  # every domain that declares its traffic
        *history.malformed(sample),
        *history.lax_order(),
        *enrollments.lax_course(),
    ]
    return place(raws)


@pytest.fixture(scope="module")
def reference(records: list[Record]) -> Reference:
    return project(records)


@pytest.fixture(scope="module")
def stage(spark: SparkSession, records: list[Record]) -> pipeline.Staged:
    stage = pipeline.staged(records_frame(spark, records))
    return pipeline.Staged(stage.gated.cache(), stage.rejects)


def _frame(spark: SparkSession, like: DataFrame, rows: list[dict[str, object]]) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in like.columns) for r in rows], like.schema)


@pytest.mark.parametrize("model", READ_MODELS, ids=[m.name for m in READ_MODELS])
def test_every_declared_read_model_is_its_fold_applied_in_sequence_order(
    spark: SparkSession,
    stage: pipeline.Staged,
    records: list[Record],
    reference: Reference,
    model: ReadModel[Any],
) -> None:
    compare(spark, stage, records, model, reference)


def _versioned(events: list[Envelope]) -> list[Envelope]:
    """Orders of three kinds: every event stamped version 2; the first unstamped (version
    1) and the later ones version 3 (an upgraded instance); none stamped."""
    orders = sorted({e.key for e in events if e.key.startswith("order:")})
    kind = {key: i % 3 for i, key in enumerate(orders)}

    def stamped(event: Envelope) -> Envelope:
        match kind.get(event.key):
            case 0:
                return checked_copy(event, {"definition_version": 2})
            case 1 if (event.sequence or 0) > 1:
                return checked_copy(event, {"definition_version": 3})
        return event

    return [stamped(e) for e in events]


def test_the_version_of_each_saga_is_its_latest_event_s_on_the_native_route_too(
    spark: SparkSession,
) -> None:
    events = _versioned(history.with_gaps(history.order_history(30, products=4, seed=12), 9))
    records = place(history.encoded(history.messy(events, seed=13)))
    stage = pipeline.staged(records_frame(spark, records))
    reference = project(records)
    compare(spark, stage, records, ORDERS, reference)
    versions = {r.version for r in reference.rows[ORDERS.name]}
    assert versions == {1, 2, 3}
    # every record took the native route (the envelope's skeleton admits a version), and a
    # held one is stored with its version, as the projector stores it
    assert stage.gated.where("not fast").count() == 0
    held = models.pending_events(stage.gated).select("envelope").collect()
    stored = {e.encode().decode() for e, _p, _o in reference.held}
    assert stored and {r["envelope"] for r in held} == stored
    assert any('"definition_version":' in text for text in stored)


def test_a_twin_that_disagrees_with_its_fold_fails_the_comparison(
    spark: SparkSession, stage: pipeline.Staged, records: list[Record], reference: Reference
) -> None:
    status = ORDERS.column("status")
    wrong = dataclasses.replace(
        ORDERS,
        columns=tuple(
            dataclasses.replace(c, value=Latest(OrderPlaced, "customer_id")) if c is status else c
            for c in ORDERS.columns
        ),
    )
    # Its fold is derived from the same wrong columns, so it is compared with the rows
    # of the declared model's fold (the reference, folded by the catalog's ORDERS).
    with pytest.raises(PySparkAssertionError, match="DIFFERENT_ROWS"):
        compare(spark, stage, records, wrong, reference)


def test_a_twin_that_cannot_be_computed_fails_the_comparison(
    spark: SparkSession, stage: pipeline.Staged, records: list[Record], reference: Reference
) -> None:
    reason = ORDERS.column("reason")
    unknown_field = Column("reason", reason.kind, Latest(OrderPlaced, "no_such_field"), True)
    broken = dataclasses.replace(
        ORDERS, columns=tuple(unknown_field if c is reason else c for c in ORDERS.columns)
    )
    # Against the declared model's rows: the fold derived from the broken column would
    # fail on the first order (no such field) before the twin is asked.
    with pytest.raises(twins.NoNativeTwin, match="no field 'no_such_field'"):
        compare(spark, stage, records, broken, reference)


def test_the_rebuild_stages_every_declared_read_model(stage: pipeline.Staged) -> None:
    frames = pipeline.frames(stage, T_LOG)
    for model in READ_MODELS:
        table = schema.table_of(model)
        assert frames[table].columns == [c.name for c in table.columns], model.name


def test_timeline_is_one_timeline_entry_per_applied_event(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.saga_timeline(stage.gated)
    expected = _frame(spark, actual, [codec.timeline_values(r) for r in reference.timeline])
    assertDataFrameEqual(actual, expected)


def test_positions_are_the_gates_last_sequence(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.entity_positions(stage.gated)
    rows = [{"entity_key": k, "last_sequence": s} for k, s in reference.positions.items()]
    assertDataFrameEqual(actual, _frame(spark, actual, rows))


def test_held_events_are_stored_as_the_projector_stores_them(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.pending_events(stage.gated).drop("held_since")
    rows = [
        {
            "entity_key": event.key,
            "sequence": event.sequence,
            "topic_partition": partition,
            "topic_offset": offset,
            "envelope": event.encode().decode(),
        }
        for event, partition, offset in reference.held
    ]
    assert rows, "the history must leave some events held"
    assertDataFrameEqual(actual, _frame(spark, actual, rows))


def test_rejects_are_what_the_projector_dead_letters_with_its_reason(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = stage.rejects.select("partition", "offset", "reason")
    rows = [{"partition": p, "offset": o, "reason": r} for p, o, r in reference.rejected]
    assertDataFrameEqual(actual, _frame(spark, actual, rows))


def test_counters_are_the_projectors_totals(stage: pipeline.Staged, reference: Reference) -> None:
    _, counters = pipeline.tally(stage).count()
    assert counters == reference.counters


def test_receipts_name_each_commands_first_applied_event(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.command_receipts(stage.gated, T_LOG - timedelta(days=1)).drop("applied_at")
    rows = [
        {"command_id": c, "entity_key": k, "topic_partition": p, "topic_offset": o}
        for c, (k, p, o) in reference.receipts.items()
    ]
    assertDataFrameEqual(actual, _frame(spark, actual, rows))


def test_a_loosely_written_order_lands_normalized(stage: pipeline.Staged) -> None:
    row = twins.rows(stage.gated, ORDERS).where("order_id = 'o-lax'").collect()
    assert len(row) == 1
    assert json.loads(row[0]["lines"]) == [
        {"product_id": "p-lax", "quantity": 2, "unit_price": "10.75"}
    ]
    assert (row[0]["status"], str(row[0]["total"])) == ("REJECTED", "21.50")


def test_every_gate_verdict_occurs(stage: pipeline.Staged) -> None:
    seen = {r["gate"] for r in stage.gated.select("gate").distinct().collect()}
    assert seen == {gate.APPLIED, gate.HELD, gate.DUPLICATE}


def test_the_swap_locks_every_declared_model_in_the_projectors_order() -> None:
    """Positions and held events, then the models in catalog order, then the timeline: the
    order a projector batch touches them in, so the swap and a batch cannot deadlock."""
    order = [t.name for t in swap.LOCK_ORDER]
    models_at = order.index("pending_events") + 1
    names = [m.name for m in READ_MODELS]
    assert order[:models_at] == ["entity_positions", "pending_events"]
    assert order[models_at : models_at + len(names)] == names
    assert order[models_at + len(names)] == "saga_timeline"
    assert {t.name for t in swap.STAGED} <= set(order)


def test_tables_the_tally_calls_unreached_are_empty(stage: pipeline.Staged) -> None:
    # Sound, never a guess: every table the job would skip holds no row in this history.
    tally = pipeline.tally(stage)
    # Every gated event and every reject is in it (a null entity type is a group too).
    assert sum(tally.events.values()) == stage.gated.count()
    assert tally.rejects == stage.rejects.count()
    frames = pipeline.frames(stage, T_LOG)
    assert set(frames) == set(swap.STAGED)
    # Everything a rebuild replaces is staged, and one thing more: the merged receipts.
    assert set(swap.REPLACED) == {*schema.READ_MODEL_TABLES, *tables.REBUILD_TABLES}
    unreached = pipeline.unreached(tally)
    for table in unreached:
        assert frames[table].count() == 0, table.name
    assert set(pipeline.frames(stage, T_LOG, tally)) == set(frames) - unreached


def test_the_tally_skips_what_no_gated_event_reaches() -> None:
    def skipped(tally: pipeline.Tally) -> set[str]:
        return {t.name for t in pipeline.unreached(tally)}

    orders_only = skipped(pipeline.Tally({(gate.APPLIED, True, "order"): 9}, rejects=0))
    assert "orders" not in orders_only and "saga_daily_stats" not in orders_only
    assert {"product_stock", "enrollments", "pending_events", "rebuild_rejects"} <= orders_only
    held = skipped(pipeline.Tally({(gate.HELD, True, "order"): 1}, rejects=1))
    assert "pending_events" not in held and "rebuild_rejects" not in held
    assert "entity_positions" in held and "orders" in held
