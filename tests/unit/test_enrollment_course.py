"""The course participant: seats on a capacity ledger, and a waitlist that promotes itself."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sagas.contracts import enrollment as e
from sagas.machinery.process import Outbound
from sagas.messages import Envelope, Message
from sagas.participants.course import CourseSeats

from .helpers import Driver, at, commands, envelope, event_envelopes, events, sent, tick

pytestmark = pytest.mark.unit

COURSE = CourseSeats()
C = "c-1"
SAGA = "enrollment-saga"


def set_course(capacity: int, credits: int = 3, title: str = "Algebra") -> Envelope:
    return envelope(e.SetCourse(title=title, capacity=capacity, credits=credits), key=C)


def from_saga(message: Message, enrollment: str) -> Envelope:
    return envelope(message, key=C, saga_id=enrollment, reply_to=SAGA)


def reserve(
    enrollment: str, student: str | None = None, waitlist: bool = True, ttl: float = 60
) -> Envelope:
    return from_saga(
        e.ReserveSeat(
            reservation_id=f"{enrollment}:t0",
            enrollment_id=enrollment,
            student_id=student or f"s-{enrollment}",
            waitlist=waitlist,
            ttl_seconds=ttl,
        ),
        enrollment,
    )


def confirm(enrollment: str) -> Envelope:
    return from_saga(e.ConfirmSeat(reservation_id=f"{enrollment}:t0"), enrollment)


def release(enrollment: str) -> Envelope:
    return from_saga(e.ReleaseSeat(reservation_id=f"{enrollment}:t0"), enrollment)


def course(capacity: int, *enrolled: str) -> Driver:
    """A course of ``capacity`` seats with ``enrolled`` confirmed in it."""
    driver = Driver(COURSE)
    driver(set_course(capacity))
    for enrollment in enrolled:
        driver(reserve(enrollment))
        driver(confirm(enrollment))
    return driver


def replies(outbound: tuple[Outbound, ...]) -> list[tuple[str | None, Message]]:
    """(saga, payload) of every reply."""
    return [
        (o.envelope.saga_id, m)
        for o, m in zip([o for o in outbound if o.channel == SAGA], sent(outbound), strict=True)
    ]


def seats(driver: Driver) -> tuple[int, int, int]:
    """(capacity, enrolled, held) of the course now."""
    state = driver.state
    return state.capacity, len(state.enrolled), state.held


# --- setting a course ------------------------------------------------------------------


def test_a_new_course_has_its_capacity_and_credits_and_says_so():
    driver = Driver(COURSE)
    result = driver(set_course(2, credits=4))
    [fact] = events(result.outbound)
    assert fact == e.CourseSet(
        title="Algebra", capacity=2, credits=4, held=0, enrolled=(), waitlist=()
    )
    assert seats(driver) == (2, 0, 0)


def test_capacity_below_the_seats_taken_is_refused_with_a_reason():
    driver = course(3, "e-1")
    driver(reserve("e-2"))
    before = driver.state
    result = driver(set_course(1))
    [refused] = events(result.outbound)
    assert isinstance(refused, e.CourseChangeRefused)
    assert refused.requested_capacity == 1
    assert refused.reason == (
        "2 seats are taken (1 enrolled, 1 held); capacity cannot go below that"
    )
    assert (refused.capacity, refused.held, refused.enrolled) == (3, 1, ("s-e-1",))
    assert driver.state == before


def test_capacity_down_to_exactly_the_seats_taken_is_allowed():
    driver = course(3, "e-1")
    driver(reserve("e-2"))
    driver(set_course(2))
    assert seats(driver) == (2, 1, 1)
    assert driver.state.seats.available == 0


# --- seats ------------------------------------------------------------------------------


def test_a_free_seat_is_held_for_the_request_and_its_saga_is_told():
    driver = course(2)
    result = driver(reserve("e-1", "s-1", ttl=60))
    [(saga, held)] = replies(result.outbound)
    assert saga == "e-1"
    assert isinstance(held, e.SeatHeld)
    assert (held.reservation_id, held.student_id, held.course_credits) == ("e-1:t0", "s-1", 3)
    assert held.expires_at == at(60).isoformat()
    assert not held.promoted
    assert events(result.outbound) == [held]
    assert event_envelopes(result.outbound)[0].saga_id == "e-1"
    assert seats(driver) == (2, 0, 1)


def test_a_confirmed_seat_lists_its_student_on_the_roster():
    driver = course(2)
    driver(reserve("e-1", "s-1"))
    result = driver(confirm("e-1"))
    [confirmed] = events(result.outbound)
    assert isinstance(confirmed, e.SeatConfirmed)
    assert confirmed.enrolled == ("s-1",)
    assert (confirmed.capacity, confirmed.held) == (2, 0)
    assert seats(driver) == (2, 1, 0)


def test_a_repeated_request_is_answered_again_and_changes_nothing():
    driver = course(2)
    driver(reserve("e-1"))
    before = driver.state
    result = driver(reserve("e-1"))
    assert [type(m) for m in sent(result.outbound)] == [e.SeatHeld]
    assert events(result.outbound) == []
    assert driver.state == before
    driver(confirm("e-1"))
    again = driver(confirm("e-1"))
    assert [type(m) for m in sent(again.outbound)] == [e.SeatConfirmed]
    assert events(again.outbound) == []


def test_a_full_course_refuses_a_request_that_does_not_want_the_waitlist():
    driver = course(1, "e-1")
    result = driver(reserve("e-2", waitlist=False))
    [(saga, refused)] = replies(result.outbound)
    assert saga == "e-2"
    assert isinstance(refused, e.SeatRefused)
    assert refused.reason == "course full"
    assert events(result.outbound) == [refused]
    assert driver.state.waitlist == ()


def test_an_unknown_course_refuses_with_a_reply_and_publishes_nothing():
    driver = Driver(COURSE)
    result = driver(reserve("e-1"))
    [refused] = sent(result.outbound)
    assert isinstance(refused, e.SeatRefused)
    assert refused.reason == "unknown course c-1"
    assert events(result.outbound) == []


@pytest.mark.parametrize("where", ["enrolled", "held", "waitlisted"])
def test_a_student_already_in_the_course_is_refused_a_second_seat(where):
    driver = course(1)
    driver(reserve("e-1", "s-1"))
    if where == "enrolled":
        driver(confirm("e-1"))
    if where == "waitlisted":
        driver(reserve("e-0", "s-0"))
        driver(release("e-1"))
        driver(reserve("e-1b", "s-1"))  # s-1 is now queued behind s-0
        assert [q.student_id for q in driver.state.waitlist] == ["s-1"]
    result = driver(reserve("e-2", "s-1"))
    [refused] = sent(result.outbound)
    assert isinstance(refused, e.SeatRefused)
    phrase = {
        "enrolled": "is already enrolled in",
        "held": "already holds a seat in",
        "waitlisted": "is already waitlisted for",
    }[where]
    assert refused.reason == f"s-1 {phrase} c-1"


# --- the waitlist -----------------------------------------------------------------------


def test_a_full_course_queues_requests_in_the_order_it_receives_them():
    driver = course(1, "e-1")
    positions = []
    for enrollment in ("e-2", "e-3", "e-4"):
        [(saga, queued)] = replies(driver(reserve(enrollment)).outbound)
        assert saga == enrollment
        assert isinstance(queued, e.Waitlisted)
        positions.append(queued.position)
    assert positions == [1, 2, 3]
    assert [(w.enrollment_id, w.position) for w in queued.waitlist] == [
        ("e-2", 1),
        ("e-3", 2),
        ("e-4", 3),
    ]
    again = driver(reserve("e-3"))  # a repeat: its place, not a new one
    assert [(type(m), getattr(m, "position", None)) for m in sent(again.outbound)] == [
        (e.Waitlisted, 2)
    ]
    assert len(driver.state.waitlist) == 3


def test_a_released_seat_goes_to_the_head_of_the_waitlist_in_the_same_decision():
    driver = course(1, "e-1")
    driver(reserve("e-2", "s-2"))
    driver(reserve("e-3", "s-3"))
    result = driver(release("e-1"))
    told = replies(result.outbound)
    assert [(saga, type(m)) for saga, m in told] == [
        ("e-1", e.SeatReleased),
        ("e-2", e.SeatHeld),
        ("e-3", e.WaitlistMoved),
    ]
    promoted = told[1][1]
    assert isinstance(promoted, e.SeatHeld) and promoted.promoted
    assert promoted.student_id == "s-2"
    moved = told[2][1]
    assert isinstance(moved, e.WaitlistMoved) and moved.position == 1
    facts = event_envelopes(result.outbound)
    assert [(f.type, f.saga_id) for f in facts] == [
        ("course.SeatReleased", "e-1"),
        ("course.SeatHeld", "e-2"),
    ]
    last = facts[-1].message()
    assert isinstance(last, e.CourseFact)
    assert (last.enrolled, last.held) == ((), 1)
    assert [(w.enrollment_id, w.position) for w in last.waitlist] == [("e-3", 1)]
    assert seats(driver) == (1, 0, 1)


def test_a_newcomer_never_takes_a_seat_freed_for_the_waitlist():
    driver = course(1, "e-1")
    driver(reserve("e-2"))
    driver(release("e-1"))
    result = driver(reserve("e-9", waitlist=True))
    [queued] = sent(result.outbound)
    assert isinstance(queued, e.Waitlisted) and queued.position == 1
    assert driver.state.holders == {"e-2:t0": "s-e-2"}


def test_an_expired_hold_promotes_the_head_of_the_waitlist():
    driver = course(1)
    driver(reserve("e-1", ttl=10))
    driver(reserve("e-2", ttl=10))
    result = driver(tick(C), now=at(10))
    told = [(saga, type(m)) for saga, m in replies(result.outbound)]
    assert told == [("e-1", e.SeatReleased), ("e-2", e.SeatHeld)]
    released = sent(result.outbound)[0]
    assert isinstance(released, e.SeatReleased) and released.reason == "expired"
    assert driver.state.holders == {"e-2:t0": "s-e-2"}
    assert driver.record is not None
    assert driver.record.deadlines == {"expire:e-2:t0": at(20)}


def test_an_overdue_hold_is_expired_before_the_next_command_is_decided():
    driver = course(1)
    driver(reserve("e-1", ttl=10))
    result = driver(reserve("e-2"), now=at(11))  # no tick came
    told = [(saga, type(m)) for saga, m in replies(result.outbound)]
    assert told == [("e-1", e.SeatReleased), ("e-2", e.SeatHeld)]


def test_a_capacity_raise_promotes_as_many_as_it_frees():
    driver = course(1, "e-1")
    for enrollment in ("e-2", "e-3", "e-4"):
        driver(reserve(enrollment))
    result = driver(set_course(3))
    told = [(saga, type(m)) for saga, m in replies(result.outbound)]
    assert told == [("e-2", e.SeatHeld), ("e-3", e.SeatHeld), ("e-4", e.WaitlistMoved)]
    assert seats(driver) == (3, 1, 2)
    assert [q.enrollment_id for q in driver.state.waitlist] == ["e-4"]


def test_a_dropped_waitlisted_request_leaves_and_those_behind_move_up():
    driver = course(1, "e-1")
    for enrollment in ("e-2", "e-3", "e-4"):
        driver(reserve(enrollment))
    result = driver(release("e-3"))
    told = replies(result.outbound)
    assert [(saga, type(m)) for saga, m in told] == [
        ("e-3", e.SeatReleased),
        ("e-4", e.WaitlistMoved),
    ]
    left = told[0][1]
    assert isinstance(left, e.SeatReleased) and left.reason == "dequeued"
    assert [(w.enrollment_id, w.position) for w in left.waitlist] == [("e-2", 1), ("e-4", 2)]
    assert seats(driver) == (1, 1, 0)  # nobody promoted: no seat was freed
    late = driver(reserve("e-3"))  # a request after its own release is not queued again
    assert [type(m) for m in sent(late.outbound)] != [e.Waitlisted]
    assert [q.enrollment_id for q in driver.state.waitlist] == ["e-2", "e-4"]


def test_a_confirmed_seat_released_is_refunded_and_promotes():
    driver = course(1, "e-1")
    driver(reserve("e-2"))
    result = driver(release("e-1"))
    released = sent(result.outbound)[0]
    assert isinstance(released, e.SeatReleased) and released.reason == "refunded"
    assert seats(driver) == (1, 0, 1)
    repeat = driver(release("e-1"))
    assert repeat.outbound == ()  # given back once
    assert seats(driver) == (1, 0, 1)


def test_a_confirm_after_the_hold_expired_is_refused():
    driver = course(1)
    driver(reserve("e-1", ttl=10))
    result = driver(confirm("e-1"), now=at(11))
    told = [type(m) for m in sent(result.outbound)]
    assert told == [e.SeatReleased, e.SeatConfirmRefused]
    assert seats(driver) == (1, 0, 0)


def test_commands_for_others_change_nothing():
    driver = course(1)
    before = driver.state
    result = driver(envelope(e.SetStudent(name="x", max_credits=1), key=C))
    assert commands(result.outbound) == []
    assert driver.state == before


def test_a_full_waitlist_refuses_more_requests():
    driver = Driver(CourseSeats(max_waitlist=2))
    driver(set_course(1))
    for enrollment in ("e-1", "e-2", "e-3"):
        driver(reserve(enrollment))
    [refused] = sent(driver(reserve("e-4")).outbound)
    assert isinstance(refused, e.SeatRefused)
    assert refused.reason == "course full and its waitlist too"
    assert len(driver.state.waitlist) == 2


def test_a_seat_kept_longer_than_the_retention_is_still_given_back_when_released():
    """The ledger forgets a sale after its retention; the roster does not: a student who
    drops the course an hour later frees the seat (and a repeated confirm is answered)."""
    driver = Driver(CourseSeats(retention=timedelta(seconds=60)))
    driver(set_course(2), at(0))
    driver(reserve("e-1"), at(0))
    driver(confirm("e-1"), at(0))
    driver(reserve("e-2"), at(3600))
    driver(release("e-2"), at(3600))  # a close an hour later ages e-1's sale out
    assert "e-1:t0" not in driver.state.seats.closed and "e-1:t0" in driver.state.enrolled
    [(_, again)] = replies(driver(confirm("e-1"), at(3600)).outbound)
    assert isinstance(again, e.SeatConfirmed)
    [(_, released)] = replies(driver(release("e-1"), at(3601)).outbound)
    assert isinstance(released, e.SeatReleased) and released.reason == "refunded"
    assert seats(driver) == (2, 0, 0)
