"""Records stored before the participants kept the reservation primitive still read, and
go on as they would have."""

from __future__ import annotations

import pytest

from sagas.contracts import enrollment as e
from sagas.machinery.record import Record
from sagas.machinery.step import step
from sagas.messages import Envelope, Message
from sagas.participants.course import CourseSeats, CourseState
from sagas.participants.student import StudentCredits, StudentState

from .helpers import at, envelope, sent

pytestmark = pytest.mark.unit

# A course of 3 seats as stored before: s-1 enrolled (a sale: on_hand 2), s-2 holding one
# (its hold's amount named quantity), an earlier cancel before its request (a tombstone).
OLD_COURSE = (
    '{"state": {"exists": true, "title": "Algebra", "credits": 3, "seats": {"on_hand": 2,'
    ' "holds": {"e-2:t0": {"quantity": 1, "expires_at": "2024-01-01T12:01:00Z",'
    ' "saga_id": "e-2", "reply_to": "enrollment-saga"}},'
    ' "closed": {"e-1:t0": ["confirmed", 1, 1704110400], "e-9:t0": ["cancelled", 0, 1704110400]}},'
    ' "holders": {"e-2:t0": "s-2"}, "enrolled": {"e-1:t0": "s-1"}, "waitlist": []},'
    ' "seen": [], "sequence": 3, "deadlines": {}}'
)

# A student of 10 credits as stored before: 4 used in c-1, a transfer to c-2 (6 credits)
# holding the difference, and a refusal remembered in words.
OLD_STUDENT = (
    '{"state": {"exists": true, "name": "Ada", "max_credits": 10,'
    ' "holds": {"e-1:t1": {"enrollment_id": "e-1", "course_id": "c-2", "credits": 6,'
    ' "replaces": "e-1:t0"}},'
    ' "enrolled": {"e-1:t0": {"enrollment_id": "e-1", "course_id": "c-1", "credits": 4}},'
    ' "closed": {"e-3:t0": ["refused: over max_credits: 6 taken + 5 for c-3 > 10", 1704110400]}},'
    ' "seen": [], "sequence": 3, "deadlines": {}}'
)


def from_saga(message: Message, saga: str, key: str) -> Envelope:
    return envelope(message, key=key, saga_id=saga, reply_to="enrollment-saga")


def test_an_old_course_record_reads_with_its_sale_as_a_kept_seat_and_goes_on():
    record = Record.codec(CourseState).model_validate_json(OLD_COURSE)
    state = record.state
    assert (state.capacity, state.held, len(state.enrolled), state.seats.available) == (3, 1, 1, 1)
    assert state.seats.committed == {"e-1:t0": 1}
    courses = CourseSeats()
    repeat = step(
        courses, record, from_saga(e.ConfirmSeat(reservation_id="e-9:t0"), "e-9", "c-1"), at(1)
    )
    [refused] = sent(repeat.outbound)
    assert isinstance(refused, e.SeatConfirmRefused) and refused.reason == "reservation cancelled"
    dropped = step(
        courses, record, from_saga(e.ReleaseSeat(reservation_id="e-1:t0"), "e-1", "c-1"), at(1)
    )
    [released] = sent(dropped.outbound)
    assert isinstance(released, e.SeatReleased) and released.reason == "refunded"
    assert (released.capacity, released.enrolled, dropped.record.state.seats.available) == (
        3,
        (),
        2,
    )


def test_an_old_student_record_reads_with_its_transfer_holding_the_difference():
    record = Record.codec(StudentState).model_validate_json(OLD_STUDENT)
    state = record.state
    assert (state.max_credits, state.credits_used, state.credits_held) == (10, 4, 2)
    students = StudentCredits()
    again = step(
        students,
        record,
        from_saga(
            e.HoldCredits(reservation_id="e-3:t0", enrollment_id="e-3", course_id="c-3", credits=5),
            "e-3",
            "s-1",
        ),
        at(1),
    )
    [refused] = sent(again.outbound)
    assert refused.reason == "refused: over max_credits: 6 taken + 5 for c-3 > 10"  # as before
    moved = step(
        students, record, from_saga(e.ConfirmCredits(reservation_id="e-1:t1"), "e-1", "s-1"), at(1)
    )
    [confirmed] = sent(moved.outbound)
    assert isinstance(confirmed, e.CreditsConfirmed)
    assert (confirmed.credits_used, confirmed.credits_held) == (6, 0)
    assert [x.course_id for x in confirmed.enrollments] == ["c-2"]
