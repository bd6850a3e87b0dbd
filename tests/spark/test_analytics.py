"""Daily saga analytics against the same numbers computed in plain Python from the folds'
applied events: per start day and declared saga type, sagas per outcome, exact p50/p95 of
the time from start to final state (linear interpolation), and the reasons of failed
sagas; a saga type that is not declared is not counted at all."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import date, datetime

import pytest
from pyspark.sql import SparkSession

from sagas.catalog import SAGA_TYPES, saga_type_of
from sagas.contracts.ledger import Reserved
from sagas.messages import Envelope
from sagas.projections.declare import SagaType
from spark_projections import analytics, pipeline
from tests.spark import history
from tests.spark.compare import assertDataFrameEqual
from tests.spark.frames import place, records_frame
from tests.spark.reference import project

pytestmark = pytest.mark.spark

Saga = tuple[date, str, str, str | None, float | None]
"""start day, saga type, outcome, reason, duration in ms"""


def _sagas(applied: list[Envelope]) -> list[Saga]:
    own: dict[str, list[Envelope]] = defaultdict(list)
    for event in applied:
        saga = saga_type_of(event.key.split(":", 1)[0])
        if saga is not None and event.saga_id is not None and event.key == saga.key(event.saga_id):
            own[event.key].append(event)
    sagas = []
    for key, events in own.items():
        events.sort(key=lambda e: e.sequence or 0)
        start = events[0].occurred_at
        saga = saga_type_of(key.split(":", 1)[0])
        assert saga is not None
        final = next((e for e in events if _final(saga, e)), None)
        outcome = final.payload["status"] if final else analytics.IN_FLIGHT
        reason = final.payload.get("reason") if final else None
        duration = _ms(final.occurred_at) - _ms(start) if final else None
        sagas.append((start.date(), key.split(":", 1)[0], outcome, reason, duration))
    return sagas


def _final(saga: SagaType, event: Envelope) -> bool:
    return isinstance(event.message(), saga.statuses.event) and saga.is_final(
        event.payload["status"]
    )


def _ms(moment: datetime) -> float:
    return moment.timestamp() * 1000


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@pytest.fixture(scope="module")
def inputs(spark: SparkSession) -> tuple[pipeline.Staged, list[Saga]]:
    events = history.messy(history.order_history(300, products=5, seed=21, days=3), seed=2)
    records = place(history.encoded(events))
    stage = pipeline.staged(records_frame(spark, records))
    return stage, _sagas(project(records).applied)


def test_daily_stats_count_outcomes_and_time_to_final_state(
    spark: SparkSession, inputs: tuple[pipeline.Staged, list[Saga]]
) -> None:
    stage, sagas = inputs
    groups: dict[tuple[date, str, str], list[float | None]] = defaultdict(list)
    for day, saga_type, outcome, _, duration in sagas:
        groups[(day, saga_type, outcome)].append(duration)
    actual = analytics.daily_stats(analytics.sagas(stage.gated))
    rows = []
    for (day, saga_type, outcome), durations in groups.items():
        known = [d for d in durations if d is not None]
        p50, p95 = _percentile(known, 0.5), _percentile(known, 0.95)
        rows.append((day, saga_type, outcome, len(durations), p50, p95))
    assert {r[2] for r in rows} >= {"CONFIRMED", "REJECTED", "CANCELLED", "IN_FLIGHT"}
    assertDataFrameEqual(actual, spark.createDataFrame(rows, actual.schema))


def test_daily_reasons_count_why_sagas_failed(
    spark: SparkSession, inputs: tuple[pipeline.Staged, list[Saga]]
) -> None:
    stage, sagas = inputs
    counts = Counter((d, t, o, r) for d, t, o, r, _ in sagas if r is not None)
    actual = analytics.daily_reasons(analytics.sagas(stage.gated))
    rows = [(*k, n) for k, n in counts.items()]
    assert any("expired" in r[3] for r in rows) and any("declined" in r[3] for r in rows)
    assertDataFrameEqual(actual, spark.createDataFrame(rows, actual.schema))


def test_only_declared_saga_types_are_counted(spark: SparkSession) -> None:
    """A ledger for lockers (no saga declared for ``locker``) whose stream looks like
    a saga's own (``locker:c-1`` naming saga ``c-1``): not a saga in flight forever."""
    course = Envelope.wrap(
        Reserved(on_hand=30, reserved=1, reservation_id="r-1", quantity=1, expires_at="x"),
        message_id="m-locker",
        key="locker:c-1",
        occurred_at=history.T0,
        saga_id="c-1",
        entity_type="locker",
        sequence=1,
    )
    events = [*history.order_history(3, products=1, seed=5), course]
    stage = pipeline.staged(records_frame(spark, place(history.encoded(events))))
    counted = {r["saga_type"] for r in analytics.sagas(stage.gated).collect()}
    assert counted == {s.entity_type for s in SAGA_TYPES} and "locker" not in counted
    assert analytics.sagas(stage.gated, saga_types=()).count() == 0
