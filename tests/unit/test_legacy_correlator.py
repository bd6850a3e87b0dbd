"""The legacy CDC correlator (stage 1: per source transaction) over the real Debezium
records in tests/fixtures/debezium/, both converter shapes: every arrival order, with and
without the transaction's END record, redeliveries, a late row, the snapshot."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from sagas.contracts import legacy as lg
from sagas.contracts.system import Tick
from sagas.debezium import decode_change, decode_transaction_marker
from sagas.definitions.legacy_correlator import LegacyCorrelator, classify, correlation_key
from sagas.ids import derive_id
from sagas.machinery.record import Record
from sagas.machinery.step import EVENTS_CHANNEL, due_keys, step
from sagas.messages import Envelope, Message

from .helpers import T0, at
from .test_debezium_decode import SCENARIOS, records

pytestmark = pytest.mark.unit

WINDOW = timedelta(seconds=10)


def rows(schemas: bool, scenario: str) -> list[lg.RowChanged]:
    wanted = set(SCENARIOS[scenario])
    found = []
    for r in records(schemas):
        if r["topic"].endswith(".transaction"):
            continue
        change = decode_change(r["value"])
        if change is not None and change.tx_id in wanted and not change.snapshot:
            found.append(change)
    return found


def end_of(schemas: bool, tx_id: int) -> lg.TransactionEnded:
    for r in records(schemas):
        if r["topic"].endswith(".transaction"):
            marker = decode_transaction_marker(r["value"])
            if marker.status == "END" and marker.tx_id == tx_id:
                assert marker.event_count is not None
                return lg.TransactionEnded(tx_id=tx_id, event_count=marker.event_count)
    raise AssertionError(f"no END for {tx_id}")


def as_envelope(message: Message, *, redelivery: int = 0) -> Envelope:
    """What the thin agent will send: keyed by correlation key, with an id derived from the
    source position (a redelivered copy that kept its id is dropped by the machinery; the
    ``redelivery`` tag gives it a new id, so the state's own dedupe is what is tested)."""
    if isinstance(message, lg.RowChanged):
        key, ident = correlation_key(message), message.position
    else:
        assert isinstance(message, lg.TransactionEnded)
        key, ident = f"tx:{message.tx_id}", f"end/{message.tx_id}"
    return Envelope.wrap(
        message,
        message_id=derive_id("debezium", f"{ident}#{redelivery}"),
        key=key,
        occurred_at=T0,
    )


@dataclass
class Correlator:
    """The process over many keys, as the agent and its state table run it."""

    process: LegacyCorrelator = field(default_factory=lambda: LegacyCorrelator(WINDOW))
    records: dict[str, Record[Any]] = field(default_factory=dict)
    emitted: list[Envelope] = field(default_factory=list)

    def feed(self, env: Envelope, now: datetime = T0) -> None:
        result = step(self.process, self.records.get(env.key), env, now)
        self.records[env.key] = result.record
        self.emitted += [o.envelope for o in result.outbound if o.channel == EVENTS_CHANNEL]

    def tick(self, now: datetime) -> None:
        for key in due_keys(self.records.items(), now):
            self.feed(
                Envelope.wrap(Tick(), message_id=f"tick-{key}-{now}", key=key, occurred_at=now), now
            )

    def events(self) -> list[Message]:
        return [e.message() for e in self.emitted]


def run(messages: Iterable[Message], *, close_at: float = 11.0) -> list[Message]:
    c = Correlator()
    for i, m in enumerate(messages):
        c.feed(as_envelope(m), at(i * 0.1))
    c.tick(at(close_at))
    return c.events()


SHAPES = pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "plain"])


@SHAPES
@pytest.mark.parametrize("end", ["none", "first", "last"])
def test_one_transaction_enrollment_in_every_order_is_one_event(schemas: bool, end: str) -> None:
    three = rows(schemas, "enroll_one_transaction")
    (tx,) = SCENARIOS["enroll_one_transaction"]
    for order in itertools.permutations(three):
        feed: list[Message] = list(order)
        if end == "first":
            feed.insert(0, end_of(schemas, tx))
        elif end == "last":
            feed.append(end_of(schemas, tx))
        # With the END record the transaction closes at its last row, before the window.
        events = run(feed, close_at=11.0 if end == "none" else 0.5)
        assert events == [
            lg.StudentEnrolled(
                student_id="s-jhon",
                course_id="c-physics",
                student=lg.StudentRow(
                    id="s-jhon", name="Jhon", email="jhon@school.test", max_credits=20
                ),
                course=lg.CourseRow(
                    id="c-physics", title="Physics", teacher="Curie", capacity=30, credits=5
                ),
                student_created=True,
                course_created=True,
                tx_ids=(tx,),
            )
        ], order


@SHAPES
def test_nothing_is_emitted_before_the_window_ends_without_an_end_record(schemas: bool) -> None:
    c = Correlator()
    for m in rows(schemas, "enroll_one_transaction"):
        c.feed(as_envelope(m))
    c.tick(T0 + WINDOW - timedelta(milliseconds=1))
    assert c.events() == []
    c.tick(T0 + WINDOW)
    assert [type(e) for e in c.events()] == [lg.StudentEnrolled]


@SHAPES
def test_redelivered_rows_yield_no_second_event(schemas: bool) -> None:
    three = rows(schemas, "enroll_one_transaction")
    c = Correlator()
    for copy in range(2):  # a connector restart redelivers, within the window
        for m in three:
            c.feed(as_envelope(m, redelivery=copy))
    c.tick(at(11))
    for m in three:  # and again after the transaction closed
        c.feed(as_envelope(m, redelivery=2), at(12))
    c.feed(as_envelope(three[0]), at(13))  # the very same record: the machinery drops it
    c.tick(at(30))
    assert [type(e) for e in c.events()] == [lg.StudentEnrolled]


@SHAPES
def test_a_link_moved_to_another_course_is_one_enrollment_changed(schemas: bool) -> None:
    moved = rows(schemas, "enrollment_course_changed")
    (tx,) = SCENARIOS["enrollment_course_changed"]
    for order in itertools.permutations(moved):
        assert run(order) == [
            lg.EnrollmentChanged(
                student_id="s-ana",
                from_course_id="c-chem",
                course_id="c-physics",
                course=None,
                tx_ids=(tx,),
            )
        ]


@SHAPES
def test_an_email_update_is_one_student_updated(schemas: bool) -> None:
    (tx,) = SCENARIOS["student_email_updated"]
    assert run(rows(schemas, "student_email_updated")) == [
        lg.StudentUpdated(
            student_id="s-jhon",
            student=lg.StudentRow(
                id="s-jhon", name="Jhon", email="jhon.doe@school.test", max_credits=20
            ),
            changed=("email",),
            created=False,
            tx_ids=(tx,),
        )
    ]


@SHAPES
def test_a_course_update_is_one_course_updated(schemas: bool) -> None:
    (event,) = run(rows(schemas, "course_capacity_updated"))
    assert isinstance(event, lg.CourseUpdated)
    assert (event.course_id, event.changed, event.created) == ("c-physics", ("capacity",), False)


@SHAPES
def test_a_link_delete_is_one_enrollment_dropped(schemas: bool) -> None:
    (tx,) = SCENARIOS["enrollment_dropped"]
    assert run(rows(schemas, "enrollment_dropped")) == [
        lg.EnrollmentDropped(student_id="s-jhon", course_id="c-physics", tx_ids=(tx,))
    ]


@SHAPES
def test_snapshot_rows_seed_no_events_unless_configured(schemas: bool) -> None:
    seed = [
        c
        for r in records(schemas)
        if not r["topic"].endswith(".transaction")
        and (c := decode_change(r["value"])) is not None
        and c.snapshot
    ]
    assert len(seed) == 1
    assert run(seed) == []
    c = Correlator(process=LegacyCorrelator(WINDOW, snapshot_events=True))
    c.feed(as_envelope(seed[0]))
    (event,) = c.events()
    assert isinstance(event, lg.StudentUpdated) and event.created


@SHAPES
def test_a_row_after_the_window_closed_is_emitted_alone(schemas: bool) -> None:
    """Documented behaviour: a late row is never lost, never merged into what was already
    published. Here the link comes after the window: the student and the course were
    published as created alone, and the enrollment follows with no rows and no `created`."""
    by_table = {c.table: c for c in rows(schemas, "enroll_one_transaction")}
    c = Correlator()
    c.feed(as_envelope(by_table["student"]))
    c.feed(as_envelope(by_table["course"]))
    c.tick(at(10))
    c.feed(as_envelope(by_table["student_course"]), at(12))
    student_updated, course_updated, enrolled = c.events()
    assert isinstance(student_updated, lg.StudentUpdated) and student_updated.created
    assert isinstance(course_updated, lg.CourseUpdated) and course_updated.created
    assert isinstance(enrolled, lg.StudentEnrolled)
    assert (enrolled.student, enrolled.course, enrolled.student_created) == (None, None, False)


@SHAPES
def test_stage_one_yields_one_event_per_transaction_of_a_three_transaction_action(
    schemas: bool,
) -> None:
    """What stage 1 does today with student, course and link in three transactions; stage 2
    (CDC_STATUS.md) must merge these into ONE StudentEnrolled with both `created` flags."""
    events = run(rows(schemas, "enroll_three_transactions"))
    assert sorted(type(e).__name__ for e in events) == [
        "CourseUpdated",
        "StudentEnrolled",
        "StudentUpdated",
    ]


def test_event_ids_are_deterministic() -> None:
    """Re-running the same input (a worker restart before its state was stored) re-creates
    the same message ids, so consumers drop the copies."""
    three = rows(False, "enroll_one_transaction")

    def ids() -> list[str]:
        c = Correlator()
        for m in three:
            c.feed(as_envelope(m))
        c.tick(at(11))
        return [e.message_id for e in c.emitted]

    assert ids() == ids() and len(ids()) == 1


# --- classify() on hand-made rows: cases the fixtures do not cover -------------------------

_lsn = itertools.count(1000)


def change(
    table: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> lg.RowChanged:
    model = lg.ROW_MODELS[table]
    row = after if after is not None else before
    assert row is not None
    key = "/".join(str(v) for k, v in row.items() if k in ("id", "student_id", "course_id"))
    lsn = next(_lsn)
    return lg.RowChanged(
        table=table,  # type: ignore[arg-type]
        op=op,  # type: ignore[arg-type]
        before=None if before is None else model.model_validate(before),
        after=None if after is None else model.model_validate(after),
        tx_id=7,
        lsn=lsn,
        ts_ms=1,
        snapshot=False,
        position=f"{lsn}/{table}/{op}/{key}",
    )


def test_two_students_enrolled_in_one_transaction_are_two_events() -> None:
    events = classify(
        (
            change("student_course", "c", None, {"student_id": "a", "course_id": "x"}),
            change("student_course", "c", None, {"student_id": "b", "course_id": "x"}),
            change("student", "c", None, {"id": "b", "name": "B"}),
        )
    )
    assert [(type(e).__name__, e.student_id, e.student_created) for e in events] == [  # type: ignore[attr-defined]
        ("StudentEnrolled", "a", False),
        ("StudentEnrolled", "b", True),
    ]


def test_an_update_that_changes_nothing_yields_nothing() -> None:
    same = {"id": "s", "name": "S", "email": "s@x", "max_credits": 3}
    assert classify((change("student", "u", same, same),)) == ()


def test_a_link_deleted_and_created_again_in_one_transaction_yields_nothing() -> None:
    link = {"student_id": "s", "course_id": "c"}
    assert (
        classify(
            (change("student_course", "d", link, None), change("student_course", "c", None, link))
        )
        == ()
    )


def test_two_updates_of_one_row_in_one_transaction_are_one_event_with_both_fields() -> None:
    v0 = {"id": "c", "title": "T", "teacher": "A", "capacity": 1, "credits": 1}
    v1 = {**v0, "capacity": 2}
    v2 = {**v1, "teacher": "B"}
    (event,) = classify((change("course", "u", v0, v1), change("course", "u", v1, v2)))
    assert isinstance(event, lg.CourseUpdated)
    assert event.changed == ("teacher", "capacity") and event.course.teacher == "B"


def test_a_student_updated_with_an_enrollment_is_carried_by_the_enrollment() -> None:
    old = {"id": "s", "name": "S", "email": "old@x", "max_credits": 3}
    new = {**old, "email": "new@x"}
    (event,) = classify(
        (
            change("student", "u", old, new),
            change("student_course", "c", None, {"student_id": "s", "course_id": "c"}),
        )
    )
    assert isinstance(event, lg.StudentEnrolled)
    assert event.student is not None and event.student.email == "new@x"
    assert not event.student_created and not event.course_created and event.course is None


def test_a_row_deleted_alone_yields_nothing_yet() -> None:
    """No business event is defined for a student or course deleted alone (CDC_STATUS.md)."""
    assert classify((change("student", "d", {"id": "s"}, None),)) == ()


def test_with_a_domain_channel_each_event_naming_a_student_is_also_sent_there() -> None:
    c = Correlator(process=LegacyCorrelator(WINDOW, domain_channel="legacy-domain"))
    sent: list[tuple[str, str, str]] = []
    changes = [*rows(True, "enroll_one_transaction"), *rows(True, "course_capacity_updated")]
    for i, m in enumerate(changes):
        result = step(c.process, c.records.get(correlation_key(m)), as_envelope(m), at(i * 0.1))
        c.records[correlation_key(m)] = result.record
    for key in due_keys(c.records.items(), at(11)):
        tick = Envelope.wrap(Tick(), message_id=f"tick-{key}", key=key, occurred_at=at(11))
        result = step(c.process, c.records[key], tick, at(11))
        sent += [
            (o.channel, o.envelope.key, o.envelope.type)
            for o in result.outbound
            if o.channel != EVENTS_CHANNEL
        ]
    # The enrollment goes to the student's instance; a course update names no student.
    assert sent == [("legacy-domain", "s-jhon", "legacy.StudentEnrolled")]
