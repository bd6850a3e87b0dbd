"""Daily saga analytics against the same numbers computed in plain Python from the folds'
applied events: per start day and declared saga type (orders and enrollments), sagas per
outcome, exact p50/p95 of the time from start to outcome (linear interpolation), and the
reasons; an enrollment counted by its own statuses (final, else the settled one it rests
in, else in flight); a saga type that is not declared is not counted at all."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from datetime import date, datetime

import pytest
from pyspark.sql import SparkSession

from sagas.catalog import COURSE, ENROLLMENT_SAGA, SAGA_TYPES, STUDENT, saga_type_of
from sagas.contracts import enrollment as e
from sagas.contracts.ledger import Reserved
from sagas.messages import Envelope
from sagas.projections.declare import SagaType
from spark_projections import analytics, pipeline
from tests.spark import domains, enrollments, history
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
        end = next((e for e in events if _final(saga, e)), None)
        statuses = [e for e in events if isinstance(e.message(), saga.statuses.event)]
        if end is None and statuses and saga.is_settled(statuses[-1].payload["status"]):
            end = statuses[-1]  # resting in a settled status, as of the end of the log
        outcome = end.payload["status"] if end else analytics.IN_FLIGHT
        reason = end.payload.get("reason") if end else None
        duration = _ms(end.occurred_at) - _ms(start) if end else None
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
    enrolling = enrollments.messy_enrollments(300, seed=22, days=3)
    records = place(history.encoded([*events, *enrolling]))
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
    outcomes: dict[str, set[str]] = defaultdict(set)
    for _, saga_type, outcome, *_ in rows:
        outcomes[saga_type].add(outcome)
    assert outcomes["order"] >= {"CONFIRMED", "REJECTED", "CANCELLED", "IN_FLIGHT"}
    assert outcomes["enrollment"] >= {"ENROLLED", "WAITLISTED", "REJECTED", "DROPPED"}
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
    sagas = [
        *history.order_history(3, products=1, seed=5),
        *enrollments.enrollment_history(5, courses=1, students=2, seed=5),
        *domains.traffic_history(sagas=5),  # every domain that declares its traffic
    ]
    events = [*sagas, course]
    stage = pipeline.staged(records_frame(spark, place(history.encoded(events))))
    counted = {r["saga_type"] for r in analytics.sagas(stage.gated).collect()}
    assert counted == {s.entity_type for s in SAGA_TYPES} and "locker" not in counted
    assert analytics.sagas(stage.gated, saga_types=()).count() == 0


def test_enrollments_are_counted_by_their_own_statuses(spark: SparkSession) -> None:
    """One seat: e1 enrolls, e2 waits, e3 refuses the waitlist, e4's student never answers,
    e5 transfers in but is refused, e1 drops (which promotes e2). Final statuses end a saga;
    one resting in a settled status counts there; one mid-step is in flight."""
    c = enrollments.Clients(random.Random(1), step_s=1.0)
    c.send(COURSE, "one-seat", e.SetCourse(title="One seat", capacity=1, credits=3))
    c.send(COURSE, "roomy", e.SetCourse(title="Roomy", capacity=9, credits=3))
    for student in ("s1", "s2", "s3", "s4", "s5"):
        c.send(STUDENT, student, e.SetStudent(name=student, max_credits=10))
    take = {"e1": "s1", "e2": "s2", "e3": "s3"}
    for enrollment, student in take.items():
        c.send(ENROLLMENT_SAGA, enrollment, _enroll(student, "one-seat", enrollment != "e3"))
    c.bus.paused.add(STUDENT)  # e4's student replies stall: the saga stays PENDING
    c.send(ENROLLMENT_SAGA, "e4", _enroll("s4", "roomy"))
    c.bus.paused.discard(STUDENT)  # (what it held stays held)
    c.send(ENROLLMENT_SAGA, "e5", _enroll("s5", "roomy"))
    c.send(ENROLLMENT_SAGA, "e5", e.Transfer(course_id="one-seat"))  # full: refused
    c.send(ENROLLMENT_SAGA, "e1", e.Drop())
    stage = pipeline.staged(records_frame(spark, place(history.encoded(c.bus.published))))
    rows = analytics.sagas(stage.gated).where("saga_type = 'enrollment'").collect()
    assert {r["saga_id"]: (r["outcome"], r["reason"]) for r in rows} == {
        "e1": ("DROPPED", "dropped by the student"),
        "e2": ("ENROLLED", None),
        "e3": ("REJECTED", "course full"),
        "e4": (analytics.IN_FLIGHT, None),
        "e5": ("ENROLLED", "transfer to one-seat refused: course full"),
    }
    durations = {r["saga_id"]: r["duration_ms"] for r in rows}
    # e3 was refused in the decisions its request set off; e2 waited for e1's drop.
    assert durations["e4"] is None and durations["e2"] > durations["e3"] == 0


def _enroll(student: str, course: str, waitlist: bool = True) -> e.Enroll:
    return e.Enroll(student_id=student, course_id=course, waitlist=waitlist)
