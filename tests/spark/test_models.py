"""Each native read-model rule against the pure Python fold it re-expresses, on a messy
history: duplicates, entities written out of order and late, gaps that never fill,
malformed records, loosely written events (exact route) and a type from a newer producer.

The expected DataFrames are the folds' rows in their stored form (the projector's own
``codec``), compared whole with ``assertDataFrameEqual``.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pyspark.sql import DataFrame, SparkSession

from readside import codec
from spark_projections import gate, models, pipeline
from tests.spark import history
from tests.spark.compare import assertDataFrameEqual
from tests.spark.frames import T_LOG, place, records_frame
from tests.spark.reference import Reference, project

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def records() -> list[tuple[int, int, bytes | None, bytes | None]]:
    events = history.with_gaps(history.order_history(120, products=6, seed=3))
    messy = history.messy(events, seed=4)
    sample = next(e for e in events if e.type == "order.StatusChanged" and e.sequence == 2)
    raws = [*history.encoded(messy), *history.malformed(sample), *history.lax_order()]
    return place(raws)


@pytest.fixture(scope="module")
def reference(records: list[tuple[int, int, bytes | None, bytes | None]]) -> Reference:
    return project(records)


@pytest.fixture(scope="module")
def stage(
    spark: SparkSession, records: list[tuple[int, int, bytes | None, bytes | None]]
) -> pipeline.Staged:
    stage = pipeline.staged(records_frame(spark, records))
    return pipeline.Staged(stage.gated.cache(), stage.rejects)


def _frame(spark: SparkSession, like: DataFrame, rows: list[dict[str, object]]) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in like.columns) for r in rows], like.schema)


def test_orders_are_apply_order_folded_in_sequence_order(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.orders(stage.gated)
    expected = _frame(spark, actual, [codec.order_values(r) for r in reference.orders])
    assertDataFrameEqual(actual, expected)


def test_product_stock_is_apply_stock_folded(
    spark: SparkSession, stage: pipeline.Staged, reference: Reference
) -> None:
    actual = models.product_stock(stage.gated)
    expected = _frame(spark, actual, [codec.stock_values(r) for r in reference.stock])
    assertDataFrameEqual(actual, expected)


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
    _, counters = pipeline.count(stage)
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
    row = models.orders(stage.gated).where("order_id = 'o-lax'").collect()
    assert len(row) == 1
    assert json.loads(row[0]["lines"]) == [
        {"product_id": "p-lax", "quantity": 2, "unit_price": "10.75"}
    ]
    assert (row[0]["status"], str(row[0]["total"])) == ("REJECTED", "21.50")


def test_every_gate_verdict_occurs(stage: pipeline.Staged) -> None:
    seen = {r["gate"] for r in stage.gated.select("gate").distinct().collect()}
    assert seen == {gate.APPLIED, gate.HELD, gate.DUPLICATE}
