"""A read model the catalog does not know, rebuilt natively with no code in the Spark job:
course seats on the capacity ledger, declared here (row, declaration) the way a new domain
declares its models in ``sagas/``, and compared with the fold derived from it.

Its declaration uses every kind of column value, and its ``starts`` type is not every
event it reads, so a course reopened (a second ``CapacitySet``) restarts its row: what came
before (a refusal, a release) no longer shows.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from pyspark.sql import SparkSession

from sagas.contracts import ledger
from sagas.messages import Envelope
from sagas.projections.declare import (
    Column,
    Constant,
    Difference,
    EntityId,
    Integer,
    Latest,
    LatestSequence,
    LatestTime,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row, entity_id
from sagas.projections.stock import PRODUCT_STOCK
from spark_projections import pipeline
from tests.spark import history
from tests.spark.compare import compare
from tests.spark.frames import place, records_frame
from tests.spark.reference import Record

pytestmark = pytest.mark.spark


class CourseRow(Row):
    course_id: str
    seats: int
    held: int
    free: int
    last_refusal: str | None
    last_release: str
    opened_at: datetime
    updated_at: datetime
    last_sequence: int


_FACT = ledger.LedgerFact
COURSES: ReadModel[CourseRow] = ReadModel(
    name="course_seats",
    entity_type="course",
    row_type=CourseRow,
    key="course_id",
    starts=ledger.CapacitySet,
    columns=(
        Column("course_id", Text(100), EntityId()),
        Column("seats", Integer(), Latest(_FACT, "on_hand")),
        Column("held", Integer(), Latest(_FACT, "reserved")),
        Column("free", Integer(), Difference(Latest(_FACT, "on_hand"), Latest(_FACT, "reserved"))),
        Column("last_refusal", Text(), Latest(ledger.ReservationRejected, "reason"), True),
        Column(
            "last_release",
            Text(20),
            OrElse(Latest(ledger.Released, "reason"), Constant("none")),
        ),
        Column("opened_at", Timestamp(), LatestTime(ledger.CapacitySet)),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("last_sequence", Integer(), LatestSequence()),
    ),
)


def _courses() -> list[Envelope]:
    """The ledger facts of a shop's history as course seats, a few courses reopened."""
    events = history.order_history(60, products=5, seed=8)
    writer = history.Writer()
    last: dict[str, Envelope] = {}
    for event in events:
        if event.entity_type != PRODUCT_STOCK.entity_type:
            continue
        course = "course:" + entity_id(event)
        last[course] = writer.emit(
            course, event.message(), event.occurred_at, event.saga_id, event.causation_id
        )
    for course in sorted(last)[:2]:  # reopened: a new start, then one more fact
        at = last[course].occurred_at + timedelta(minutes=1)
        writer.emit(course, ledger.CapacitySet(on_hand=40, reserved=0), at, None)
        writer.emit(
            course,
            ledger.Confirmed(on_hand=39, reserved=0, reservation_id="r", quantity=1),
            at + timedelta(seconds=1),
            None,
        )
    return writer.events


@pytest.fixture(scope="module")
def records() -> list[Record]:
    """Written in no particular order, with some copies: the gate sorts them out."""
    events = _courses()
    rng = random.Random(9)
    events += rng.sample(events, len(events) // 10)
    rng.shuffle(events)
    return place(history.encoded(events))


def test_a_newly_declared_model_is_rebuilt_from_its_declaration_alone(
    spark: SparkSession, records: list[Record]
) -> None:
    stage = pipeline.staged(records_frame(spark, records))
    compare(spark, stage, records, COURSES)


def test_the_history_reopens_courses_after_refusals_and_releases(records: list[Record]) -> None:
    from tests.spark.reference import project

    rows = project(records, (COURSES,)).rows[COURSES.name]
    assert len(rows) == 5
    reopened = [r for r in rows if r.seats == 39]  # type: ignore[attr-defined]
    assert len(reopened) == 2
    assert all(r.last_release == "none" for r in reopened)  # type: ignore[attr-defined]
    others = [r for r in rows if r not in reopened]
    assert any(r.last_release != "none" for r in others)  # type: ignore[attr-defined]
