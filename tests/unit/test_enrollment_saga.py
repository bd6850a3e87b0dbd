"""The enrollment saga, one transition at a time: given its replies so far, when this
message arrives, then these commands go out and this status is published."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sagas.contracts import enrollment as e
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.machinery.kit import STEP_DEADLINE
from sagas.machinery.process import Outbound
from sagas.messages import Envelope, Message

from .helpers import T0, Driver, at, commands, envelope, event_envelopes, events, sent, tick

pytestmark = pytest.mark.unit

SAGA = EnrollmentSaga()
E = "e-1"
R0, R1 = "e-1:t0", "e-1:t1"
ROSTER = {"title": "t", "capacity": 1, "credits": 3, "held": 0, "enrolled": (), "waitlist": ()}
TOTALS = {"name": "n", "max_credits": 9, "credits_used": 0, "credits_held": 0, "enrollments": ()}


def enroll(waitlist: bool = True, course: str = "c-1") -> Envelope:
    return envelope(e.Enroll(student_id="s-1", course_id=course, waitlist=waitlist), key=E)


def answer(message: Message) -> Envelope:
    return envelope(message, key=E, saga_id=E)


def seat_held(rid: str = R0, credits: int = 3, promoted: bool = False) -> Envelope:
    return answer(
        e.SeatHeld(
            **ROSTER,
            reservation_id=rid,
            student_id="s-1",
            course_credits=credits,
            expires_at="x",
            promoted=promoted,
        )
    )


def waitlisted(position: int, rid: str = R0) -> Envelope:
    return answer(e.Waitlisted(**ROSTER, reservation_id=rid, student_id="s-1", position=position))


def moved(position: int, rid: str = R0) -> Envelope:
    return answer(e.WaitlistMoved(reservation_id=rid, position=position))


def seat_refused(reason: str = "course full", rid: str = R0) -> Envelope:
    return answer(e.SeatRefused(**ROSTER, reservation_id=rid, reason=reason))


def seat_confirmed(rid: str = R0) -> Envelope:
    return answer(e.SeatConfirmed(**ROSTER, reservation_id=rid, student_id="s-1"))


def seat_released(reason: str, rid: str = R0) -> Envelope:
    return answer(e.SeatReleased(**ROSTER, reservation_id=rid, student_id="s-1", reason=reason))


def credits_held(rid: str = R0) -> Envelope:
    return answer(e.CreditsHeld(**TOTALS, reservation_id=rid, course_id="c", held=3))


def credits_refused(reason: str, rid: str = R0) -> Envelope:
    return answer(e.CreditsRefused(**TOTALS, reservation_id=rid, reason=reason))


def credits_confirmed(rid: str = R0) -> Envelope:
    return answer(e.CreditsConfirmed(**TOTALS, reservation_id=rid, course_id="c"))


def statuses(outbound: tuple[Outbound, ...]) -> list[tuple[str, str | None]]:
    return [
        (m.status, m.reason) for m in events(outbound) if isinstance(m, e.EnrollmentStatusChanged)
    ]


def last_status(outbound: tuple[Outbound, ...]) -> e.EnrollmentStatusChanged:
    return [m for m in events(outbound) if isinstance(m, e.EnrollmentStatusChanged)][-1]


def deadline(driver: Driver) -> object:
    assert driver.record is not None
    return driver.record.deadlines.get(STEP_DEADLINE)


def enrolled(course: str = "c-1") -> Driver:
    driver = Driver(SAGA)
    for env in (
        enroll(course=course),
        seat_held(),
        credits_held(),
        seat_confirmed(),
        credits_confirmed(),
    ):
        driver(env)
    assert driver.state.status == "ENROLLED"
    return driver


def transferring(committed: bool = False) -> Driver:
    driver = enrolled()
    driver(envelope(e.Transfer(course_id="c-2"), key=E))
    driver(seat_held(R1, credits=5))
    driver(credits_held(R1))
    if committed:
        driver(seat_confirmed(R1))
    return driver


RELEASE_ALL_OF_R0 = [
    ("course", "c-1", "course.ReleaseSeat"),
    ("student", "s-1", "student.ReleaseCredits"),
]

# --- enrolling --------------------------------------------------------------------------


def test_happy_path_reserve_hold_confirm_both_enrolled():
    driver = Driver(SAGA)
    started = driver(enroll())
    assert commands(started.outbound) == [("course", "c-1", "course.ReserveSeat")]
    [reserve] = sent(started.outbound)
    assert reserve == e.ReserveSeat(
        reservation_id=R0, enrollment_id=E, student_id="s-1", waitlist=True, ttl_seconds=300
    )
    # EnrollmentRequested alone says the enrollment is PENDING: no status event repeats it.
    [requested] = events(started.outbound)
    assert requested == e.EnrollmentRequested(student_id="s-1", course_id="c-1", waitlist=True)
    assert SAGA.STATUSES.announced(requested.TYPE, {}) == "PENDING"
    assert driver.state.status == "PENDING"
    assert deadline(driver) == T0 + timedelta(seconds=30)

    held = driver(seat_held(credits=4))
    assert commands(held.outbound) == [("student", "s-1", "student.HoldCredits")]
    assert sent(held.outbound) == [
        e.HoldCredits(reservation_id=R0, enrollment_id=E, course_id="c-1", credits=4)
    ]
    assert statuses(held.outbound) == []

    checked = driver(credits_held())
    assert commands(checked.outbound) == [
        ("course", "c-1", "course.ConfirmSeat"),
        ("student", "s-1", "student.ConfirmCredits"),
    ]
    assert driver(seat_confirmed()).outbound == ()
    done = driver(credits_confirmed())
    assert statuses(done.outbound) == [("ENROLLED", None)]
    assert commands(done.outbound) == []
    assert deadline(driver) is None  # settled: nothing awaited


def test_confirms_in_either_order_enroll_exactly_once():
    driver = Driver(SAGA)
    for env in (enroll(), seat_held(), credits_held()):
        driver(env)
    assert driver(credits_confirmed()).outbound == ()
    done = driver(seat_confirmed())
    assert statuses(done.outbound) == [("ENROLLED", None)]
    assert driver(seat_confirmed()).outbound == ()
    assert driver(credits_confirmed()).outbound == ()


def test_duplicate_replies_send_nothing_twice():
    driver = Driver(SAGA)
    driver(enroll())
    driver(seat_held())
    assert driver(seat_held()).outbound == ()
    driver(credits_held())
    assert driver(credits_held()).outbound == ()
    assert driver(waitlisted(3)).outbound == ()  # a seat is held: the queue is history


def test_a_redelivered_message_is_dropped_by_its_id():
    driver = Driver(SAGA)
    driver(enroll())
    held = seat_held()
    driver(held)
    assert driver(held).duplicate


def test_a_full_course_waitlists_with_a_position_and_no_timeout():
    driver = Driver(SAGA)
    driver(enroll())
    result = driver(waitlisted(4))
    status = last_status(result.outbound)
    assert (status.status, status.waitlist_position, status.course_id) == ("WAITLISTED", 4, "c-1")
    assert deadline(driver) is None
    assert driver(tick(E), now=at(3600)).outbound == ()  # waiting is not a failure


def test_a_waitlisted_enrollment_moves_up_when_told():
    driver = Driver(SAGA)
    driver(enroll())
    driver(waitlisted(4))
    result = driver(moved(2))
    assert last_status(result.outbound).waitlist_position == 2
    assert driver(moved(2)).outbound == ()  # the same position twice: nothing new


def test_a_full_course_without_the_waitlist_rejects_and_sends_nothing():
    driver = Driver(SAGA)
    driver(enroll(waitlist=False))
    result = driver(seat_refused())
    assert statuses(result.outbound) == [("REJECTED", "course full")]
    assert commands(result.outbound) == []
    assert deadline(driver) is None


def test_a_failed_student_check_releases_the_seat_and_rejects_with_the_reason():
    driver = Driver(SAGA)
    driver(enroll())
    driver(seat_held())
    result = driver(credits_refused("over max_credits: 8 taken + 3 for c-1 > 10"))
    assert commands(result.outbound) == [("course", "c-1", "course.ReleaseSeat")]
    assert statuses(result.outbound) == [("REJECTED", "over max_credits: 8 taken + 3 for c-1 > 10")]


def test_a_promotion_continues_the_waitlisted_saga_to_enrolled():
    driver = Driver(SAGA)
    driver(enroll())
    driver(waitlisted(1))
    promoted = driver(seat_held(promoted=True), now=at(100))
    status = last_status(promoted.outbound)
    assert (status.status, status.waitlist_position) == ("PENDING", None)
    assert commands(promoted.outbound) == [("student", "s-1", "student.HoldCredits")]
    assert deadline(driver) == at(130)
    for env in (credits_held(), seat_confirmed()):
        driver(env)
    assert statuses(driver(credits_confirmed()).outbound) == [("ENROLLED", None)]


def test_a_promoted_enrollment_whose_student_check_fails_is_rejected_and_gives_the_seat_back():
    driver = Driver(SAGA)
    driver(enroll())
    driver(waitlisted(1))
    driver(seat_held(promoted=True))
    result = driver(credits_refused("s-1 is already enrolled in c-1"))
    assert commands(result.outbound) == [("course", "c-1", "course.ReleaseSeat")]
    assert statuses(result.outbound) == [("REJECTED", "s-1 is already enrolled in c-1")]


@pytest.mark.parametrize(
    "lost",
    [
        seat_released("expired"),
        answer(e.SeatConfirmRefused(**ROSTER, reservation_id=R0, reason="reservation expired")),
    ],
)
def test_a_seat_hold_that_expired_before_its_confirm_rejects_and_releases_the_credits(lost):
    driver = Driver(SAGA)
    for env in (enroll(), seat_held(), credits_held()):
        driver(env)
    result = driver(lost)
    assert commands(result.outbound) == [("student", "s-1", "student.ReleaseCredits")]
    assert statuses(result.outbound) == [("REJECTED", "seat hold expired")]


def test_a_step_not_answered_in_time_rejects_and_releases_what_may_be_taken():
    driver = Driver(SAGA)
    driver(enroll())
    driver(seat_held())
    assert driver(tick(E), now=at(29)).outbound == ()
    result = driver(tick(E), now=at(30))
    assert commands(result.outbound) == RELEASE_ALL_OF_R0
    assert statuses(result.outbound) == [("REJECTED", "timeout")]
    assert event_envelopes(result.outbound)[0].saga_id == E  # named although a tick caused it


def test_a_second_enroll_of_the_same_id_is_ignored_and_replies_before_any_are_too():
    driver = Driver(SAGA)
    assert driver(seat_held()).outbound == ()
    assert driver.record is None  # the stray reply stored nothing
    driver(enroll())
    assert driver(enroll(course="c-9")).outbound == ()
    assert driver.state.course_id == "c-1"


# --- dropping ---------------------------------------------------------------------------


def test_a_drop_of_an_enrolled_student_releases_seat_and_credits():
    driver = enrolled()
    result = driver(envelope(e.Drop(), key=E))
    assert commands(result.outbound) == RELEASE_ALL_OF_R0
    assert statuses(result.outbound) == [("DROPPED", "dropped by the student")]
    assert driver(seat_released("refunded")).outbound == ()  # the late answer: nothing to do


def test_a_drop_of_a_waitlisted_enrollment_leaves_the_queue():
    driver = Driver(SAGA)
    driver(enroll())
    driver(waitlisted(2))
    result = driver(envelope(e.Drop(reason="changed my mind"), key=E))
    assert commands(result.outbound) == [("course", "c-1", "course.ReleaseSeat")]
    status = last_status(result.outbound)
    assert (status.status, status.reason, status.waitlist_position) == (
        "DROPPED",
        "changed my mind",
        None,
    )
    assert driver(seat_held(promoted=True)).outbound == ()  # a promotion that crossed the drop


def test_a_drop_while_pending_releases_what_may_be_held():
    driver = Driver(SAGA)
    driver(enroll())
    driver(seat_held())
    result = driver(envelope(e.Drop(), key=E))
    assert commands(result.outbound) == RELEASE_ALL_OF_R0
    assert statuses(result.outbound)[-1][0] == "DROPPED"


def test_a_drop_of_a_finished_enrollment_is_refused():
    driver = enrolled()
    driver(envelope(e.Drop(), key=E))
    result = driver(envelope(e.Drop(), key=E))
    assert events(result.outbound) == [
        e.CommandRefused(command="drop", status="DROPPED", reason="enrollment is DROPPED")
    ]
    assert commands(result.outbound) == []


def test_a_drop_that_overtakes_its_enrollment_wins():
    driver = Driver(SAGA)
    driver(envelope(e.Drop(), key=E))
    assert driver.state.status == "DROPPED"
    assert driver(enroll()).outbound == ()


# --- transferring -----------------------------------------------------------------------


def test_a_transfer_confirms_the_new_seat_before_it_releases_the_old():
    driver = enrolled()
    started = driver(envelope(e.Transfer(course_id="c-2"), key=E))
    assert commands(started.outbound) == [("course", "c-2", "course.ReserveSeat")]
    [reserve] = sent(started.outbound)
    assert isinstance(reserve, e.ReserveSeat)
    assert (reserve.reservation_id, reserve.waitlist) == (R1, False)  # never a waitlist
    status = last_status(started.outbound)
    assert (status.status, status.course_id, status.transfer_to) == ("TRANSFERRING", "c-1", "c-2")
    assert deadline(driver) is not None

    held = driver(seat_held(R1, credits=5))
    assert sent(held.outbound) == [
        e.HoldCredits(reservation_id=R1, enrollment_id=E, course_id="c-2", credits=5, replaces=R0)
    ]
    checked = driver(credits_held(R1))
    assert commands(checked.outbound) == [("course", "c-2", "course.ConfirmSeat")]
    committed = driver(seat_confirmed(R1))
    assert commands(committed.outbound) == [
        ("course", "c-1", "course.ReleaseSeat"),
        ("student", "s-1", "student.ConfirmCredits"),
    ]
    assert [m.reservation_id for m in sent(committed.outbound)] == [R0, R1]
    assert driver(credits_confirmed(R1)).outbound == ()  # the old seat is not yet given back
    done = driver(seat_released("refunded", R0))
    status = last_status(done.outbound)
    assert (status.status, status.course_id, status.reason) == ("ENROLLED", "c-2", None)
    assert deadline(driver) is None
    assert driver.state.course_id == "c-2"


def test_a_transfer_finishes_when_its_last_answers_come_in_the_other_order():
    driver = transferring(committed=True)
    assert driver(seat_released("refunded", R0)).outbound == ()
    assert statuses(driver(credits_confirmed(R1)).outbound) == [("ENROLLED", None)]


def test_a_transfer_into_a_full_course_is_refused_and_keeps_the_old_seat_untouched():
    driver = enrolled()
    driver(envelope(e.Transfer(course_id="c-2"), key=E))
    result = driver(seat_refused("course full", R1))
    assert commands(result.outbound) == []
    status = last_status(result.outbound)
    assert (status.status, status.course_id, status.reason) == (
        "ENROLLED",
        "c-1",
        "transfer to c-2 refused: course full",
    )
    assert deadline(driver) is None


def test_a_transfer_refused_by_the_student_check_gives_the_new_seat_back():
    driver = enrolled()
    driver(envelope(e.Transfer(course_id="c-2"), key=E))
    driver(seat_held(R1))
    result = driver(credits_refused("over max_credits: 3 taken + 4 for c-2 > 6", R1))
    assert commands(result.outbound) == [("course", "c-2", "course.ReleaseSeat")]
    assert [m.reservation_id for m in sent(result.outbound)] == [R1]
    assert statuses(result.outbound) == [
        ("ENROLLED", "transfer to c-2 refused: over max_credits: 3 taken + 4 for c-2 > 6")
    ]
    assert driver.state.course_id == "c-1"


def test_a_transfer_whose_new_seat_expired_gives_back_its_credits():
    driver = transferring()
    result = driver(seat_released("expired", R1))
    assert commands(result.outbound) == [("student", "s-1", "student.ReleaseCredits")]
    assert statuses(result.outbound) == [("ENROLLED", "transfer to c-2 refused: seat hold expired")]


def test_a_transfer_timing_out_before_the_new_seat_is_confirmed_is_undone():
    driver = transferring()
    result = driver(tick(E), now=at(30))
    assert commands(result.outbound) == [
        ("course", "c-2", "course.ReleaseSeat"),
        ("student", "s-1", "student.ReleaseCredits"),
    ]
    assert statuses(result.outbound) == [("ENROLLED", "transfer to c-2 refused: timeout")]


def test_a_committed_transfer_that_times_out_asks_again_and_goes_forward():
    driver = transferring(committed=True)
    result = driver(tick(E), now=at(30))
    assert commands(result.outbound) == [
        ("course", "c-1", "course.ReleaseSeat"),
        ("student", "s-1", "student.ConfirmCredits"),
    ]
    assert statuses(result.outbound) == []
    assert driver.state.status == "TRANSFERRING"
    assert deadline(driver) == at(60)


@pytest.mark.parametrize(
    ("setup", "course", "reason"),
    [
        ("pending", "c-2", "enrollment is PENDING"),
        ("enrolled", "c-1", "already enrolled in c-1"),
        ("transferring", "c-3", "enrollment is TRANSFERRING"),
    ],
)
def test_a_transfer_that_cannot_start_is_refused(setup, course, reason):
    if setup == "pending":
        driver = Driver(SAGA)
        driver(enroll())
    elif setup == "enrolled":
        driver = enrolled()
    else:
        driver = transferring()
    before = driver.state
    result = driver(envelope(e.Transfer(course_id=course), key=E))
    [refused] = events(result.outbound)
    assert isinstance(refused, e.CommandRefused)
    assert (refused.command, refused.reason) == ("transfer", reason)
    assert commands(result.outbound) == []
    assert driver.state == before


def test_a_drop_during_a_committed_transfer_releases_both_seats_and_ignores_the_late_release():
    driver = transferring(committed=True)
    result = driver(envelope(e.Drop(), key=E))
    assert sorted(
        (c, k, t, m.reservation_id)
        for (c, k, t), m in zip(commands(result.outbound), sent(result.outbound), strict=True)
    ) == [
        ("course", "c-1", "course.ReleaseSeat", R0),
        ("course", "c-2", "course.ReleaseSeat", R1),
        ("student", "s-1", "student.ReleaseCredits", R0),
        ("student", "s-1", "student.ReleaseCredits", R1),
    ]
    assert statuses(result.outbound) == [("DROPPED", "dropped by the student")]
    # The old seat's release, sent when the transfer committed, answers after the drop.
    assert driver(seat_released("refunded", R0)).outbound == ()
    assert driver(credits_confirmed(R1)).outbound == ()
    assert driver.state.status == "DROPPED"


def test_a_second_transfer_uses_a_fresh_reservation_and_ignores_the_first_one_s_answers():
    driver = enrolled()
    driver(envelope(e.Transfer(course_id="c-2"), key=E))
    driver(seat_refused("course full", R1))
    second = driver(envelope(e.Transfer(course_id="c-2"), key=E))
    [reserve] = sent(second.outbound)
    assert isinstance(reserve, e.ReserveSeat) and reserve.reservation_id == "e-1:t2"
    assert driver(seat_held(R1)).outbound == ()  # a late answer to the refused attempt
    assert driver.state.status == "TRANSFERRING"
