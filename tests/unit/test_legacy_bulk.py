"""A bulk legacy transaction (an ``UPDATE school.student ...`` of thousands of rows) through
the CDC correlator: its rows are sent in chunks while they arrive, the key's record never
holds them whole (it stays far under the changelog's limit), and every business event
comes out once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sagas.contracts import legacy as lg
from sagas.definitions.legacy_actions import MAX_CLAIMS, ActionCorrelator
from sagas.definitions.legacy_correlator import (
    MAX_HELD_BYTES,
    LegacyCorrelator,
    TransactionState,
    correlation_key,
)
from sagas.machinery.history import is_chunk_key
from sagas.machinery.record import Record
from sagas.machinery.step import step
from sagas.messages import Envelope
from services.worker.runner import MAX_STATE_BYTES

from .helpers import T0, at
from .test_legacy_correlator import ACTIONS, TX, Pipeline, as_envelope, change

pytestmark = pytest.mark.unit

TX_ID = 4242
STATE_BUDGET = MAX_HELD_BYTES + 16 * 1024
"""The held rows, and the histories' tails and counters of legitimate rows beside them."""


def bulk_update(n: int, first_lsn: int = 10_000, name: str = "Student") -> list[lg.RowChanged]:
    """Every row of ``UPDATE school.student SET email = ...`` over ``n`` students."""
    rows = []
    for i in range(n):
        sid = f"s-bulk-{i:05d}"
        before = lg.StudentRow(id=sid, name=f"{name} {i}", email=f"{sid}@old.test", max_credits=20)
        lsn = first_lsn + i
        rows.append(
            lg.RowChanged(
                table="student",
                op="u",
                before=before,
                after=before.model_copy(update={"email": f"{sid}@new.test"}),
                tx_id=TX_ID,
                lsn=lsn,
                ts_ms=1,
                snapshot=False,
                position=f"{lsn}/student/u/{sid}",
            )
        )
    return rows


def test_a_5000_row_transaction_yields_every_event_and_no_state_over_the_cap() -> None:
    correlator = LegacyCorrelator(actions=ACTIONS, name=TX)
    rows = bulk_update(5_000)
    key = correlation_key(rows[0])
    record: Record[Any] | None = None
    largest = 0
    sent_before_the_end: list[lg.ActionPart] = []
    for row in rows:
        result = step(correlator, record, as_envelope(row), T0)
        assert result.record.state.held_bytes <= MAX_HELD_BYTES
        if result.outbound and record is not None:
            # The held rows only grow between two chunks: the state is at its largest
            # just before one is sent (encoding every state would take seconds).
            largest = max(largest, len(key) + len(record.encode()))
        record = result.record
        sent_before_the_end += [o.envelope.message() for o in result.outbound]  # type: ignore[misc]
    end = lg.TransactionEnded(tx_id=TX_ID, event_count=5_000)
    assert record is not None and record.state.status == "open"
    largest = max(largest, len(key) + len(record.encode()))
    closed = step(correlator, record, as_envelope(end), T0)
    parts = [*sent_before_the_end, *(o.envelope.message() for o in closed.outbound)]

    assert len(sent_before_the_end) > 4_000  # in chunks while the rows arrived
    assert MAX_HELD_BYTES < largest <= STATE_BUDGET < MAX_STATE_BYTES  # all held: ~1.7 MB
    events = [p.event for p in parts]  # type: ignore[attr-defined]
    assert all(isinstance(e, lg.StudentUpdated) and e.changed == ("email",) for e in events)
    assert sorted(e.student_id for e in events) == sorted(r.after.id for r in rows)  # type: ignore[union-attr]
    assert len({p.part_id for p in parts}) == 5_000  # type: ignore[attr-defined]
    assert closed.record.state.status == "closed" and "window" not in closed.record.deadlines


def test_the_held_rows_are_counted_as_the_state_stores_them() -> None:
    correlator = LegacyCorrelator(actions=ACTIONS, name=TX)
    record: Record[Any] | None = None
    for row in bulk_update(300):
        record = step(correlator, record, as_envelope(row), T0).record
    assert record is not None
    state = record.state
    rows_json = len(TransactionState(rows=state.rows).model_dump_json())
    empty_json = len(TransactionState().model_dump_json())
    assert state.held_bytes == rows_json - empty_json + 1  # each row's JSON and a comma


def test_a_bulk_transaction_through_both_stages_publishes_each_row_once_even_redelivered() -> None:
    p = Pipeline()
    rows = bulk_update(400, name="N" * 990)  # ~2.3 KB a row: three chunks and a rest
    p.feed(0, *rows)
    record = p.bus.records[(TX, f"tx:{TX_ID}")]
    assert record.state.sent_rows > 0  # chunks went before the window
    # Debezium redelivers (a Connect restart) rows of a chunk already sent, and of the held
    # rows, under new message ids: the positions remembered drop them.
    p.feed(1, *rows[:10], *rows[-10:], redelivery=1)
    p.advance(30)  # the window closes the rest
    events = p.events()
    assert len(events) == 400
    assert {e.student_id for e in events} == {r.after.id for r in rows}  # type: ignore[attr-defined,union-attr]
    # Closed, its record holds no row and its positions in chunks beside it.
    table = p.bus.tables[TX]
    assert len(table[f"tx:{TX_ID}"]) < 4_000
    assert sum(is_chunk_key(k) and "\x1fpositions/" in k for k in table) == 400 // 32


def test_an_enrollment_a_chunk_boundary_splits_is_still_one_event() -> None:
    """The student's creation goes in the first chunk, its link after it: stage 2 merges
    them as it merges an action spread over two transactions."""
    p = Pipeline()
    created = change("student", "c", None, {"id": "s-new", "name": "New", "max_credits": 9})
    course = change("course", "c", None, {"id": "c-new", "title": "C", "capacity": 3})
    filler = bulk_update(150, first_lsn=20_000, name="N" * 990)  # past the cap
    link = change("student_course", "c", None, {"student_id": "s-new", "course_id": "c-new"})
    rows = [r.model_copy(update={"tx_id": TX_ID}) for r in (created, course, *filler, link)]
    p.feed(0, *rows)
    assert p.bus.records[(TX, f"tx:{TX_ID}")].state.sent_rows > 0
    p.feed(1, lg.TransactionEnded(tx_id=TX_ID, event_count=len(rows)))
    p.advance(60)
    enrolled = [e for e in p.events() if isinstance(e, lg.StudentEnrolled)]
    assert [(e.student_id, e.course_id, e.student_created, e.course_created) for e in enrolled] == [
        ("s-new", "c-new", True, True)
    ]
    assert not any(
        isinstance(e, lg.StudentUpdated | lg.CourseUpdated) and e.created for e in p.events()
    )


def test_a_state_stored_before_positions_were_a_history_is_read_and_still_dedupes() -> None:
    correlator = LegacyCorrelator(actions=ACTIONS, name=TX)
    (row,) = bulk_update(1)
    old = (
        '{"state":{"rows":[],"positions":["' + row.position + '"],"expected":null,'
        '"status":"closed"},"seen":[],"sequence":0,"deadlines":{}}'
    )
    record = Record.codec(TransactionState).decode("tx:1", old.encode(), lambda _: None)
    assert row.position in record.state.positions
    again = as_envelope(row, redelivery=1)
    assert step(correlator, record, again, T0).outbound == ()


def test_an_expired_transaction_is_reset_to_the_initial_state() -> None:
    correlator = LegacyCorrelator(actions=ACTIONS, name=TX, retention=timedelta(minutes=5))
    record: Record[Any] | None = None
    for row in bulk_update(100):
        record = step(correlator, record, as_envelope(row), T0).record
    tick = Envelope.decode(_tick(f"tx:{TX_ID}"))
    assert record is not None
    expired = step(correlator, record, tick, at(3600)).record
    assert expired.state == TransactionState()
    # Its positions were emptied, not replaced: the history still knows its stored chunks.
    assert expired.state.positions.front == 100


def _tick(key: str) -> bytes:
    from sagas.contracts.system import Tick

    return Envelope.wrap(Tick(), message_id="tick", key=key, occurred_at=T0).encode()


def test_thousands_of_enrollments_in_one_course_keep_its_claims_bounded() -> None:
    """A bulk INSERT of links into a course stage 2 never saw: each enrollment claims the
    course's creation. Past MAX_CLAIMS waiting, the course answers at once (not created),
    so its record stays small; the waiting ones are answered when their hold ends."""
    stage2 = ActionCorrelator(hold=timedelta(seconds=20), name=ACTIONS)
    key = "course:c-big"
    record: Record[Any] | None = None
    answered_at_once: list[lg.CourseClaimAnswered] = []
    for i in range(MAX_CLAIMS + 100):
        claim = lg.ClaimCourse(claim_id=f"claim-{i}", student_id=f"s-{i:04d}", course_id="c-big")
        env = Envelope.wrap(claim, message_id=f"m-{i}", key=key, occurred_at=T0)
        result = step(stage2, record, env, T0)
        record = result.record
        answered_at_once += [o.envelope.message() for o in result.outbound]  # type: ignore[misc]
    assert record is not None and len(record.state.claims) == MAX_CLAIMS
    assert [a.claim_id for a in answered_at_once] == [f"claim-{i}" for i in range(500, 600)]
    assert not any(a.created for a in answered_at_once)
    assert len(record.encode()) < 100_000
    tick = Envelope.decode(_tick(key))
    later = step(stage2, record, tick, T0 + timedelta(seconds=21))
    assert len(later.outbound) == MAX_CLAIMS and later.record.state.claims == ()
