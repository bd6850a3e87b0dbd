"""The student participant: may this student take this course, and their credits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sagas.contracts import enrollment as e
from sagas.messages import Envelope, Message
from sagas.participants.student import Finished, StudentCredits, StudentState

from .helpers import Driver, at, envelope, events, sent

pytestmark = pytest.mark.unit

STUDENT = StudentCredits()
S = "s-1"


def set_student(max_credits: int, name: str = "Ada") -> Envelope:
    return envelope(e.SetStudent(name=name, max_credits=max_credits), key=S)


def from_saga(message: Message, enrollment: str = "e-1") -> Envelope:
    return envelope(message, key=S, saga_id=enrollment, reply_to="enrollment-saga")


def hold(
    course: str,
    credits: int,
    enrollment: str = "e-1",
    attempt: int = 0,
    replaces: str | None = None,
) -> Envelope:
    return from_saga(
        e.HoldCredits(
            reservation_id=f"{enrollment}:t{attempt}",
            enrollment_id=enrollment,
            course_id=course,
            credits=credits,
            replaces=replaces,
        ),
        enrollment,
    )


def confirm(rid: str) -> Envelope:
    return from_saga(e.ConfirmCredits(reservation_id=rid), rid.split(":")[0])


def release(rid: str) -> Envelope:
    return from_saga(e.ReleaseCredits(reservation_id=rid), rid.split(":")[0])


def student(max_credits: int) -> Driver:
    driver = Driver(STUDENT)
    driver(set_student(max_credits))
    return driver


def taken(driver: Driver) -> tuple[int, int]:
    return driver.state.credits_used, driver.state.credits_held


def only_reply(result) -> Message:
    [message] = sent(result.outbound)
    return message


def test_a_student_is_set_and_says_so():
    driver = Driver(STUDENT)
    [fact] = events(driver(set_student(10)).outbound)
    assert fact == e.StudentSet(
        name="Ada", max_credits=10, credits_used=0, credits_held=0, enrollments=()
    )


def test_credits_are_held_then_confirmed_and_listed():
    driver = student(10)
    held = only_reply(driver(hold("c-1", 4)))
    assert isinstance(held, e.CreditsHeld)
    assert (held.held, held.credits_held, held.credits_used) == (4, 4, 0)
    assert held.enrollments == (
        e.StudentEnrollment(enrollment_id="e-1", course_id="c-1", credits=4, status="held"),
    )
    confirmed = only_reply(driver(confirm("e-1:t0")))
    assert isinstance(confirmed, e.CreditsConfirmed)
    assert (confirmed.credits_used, confirmed.credits_held) == (4, 0)
    assert confirmed.enrollments[0].status == "enrolled"


def test_credits_beyond_max_credits_are_refused_with_the_numbers():
    driver = student(5)
    driver(hold("c-1", 3))
    result = driver(hold("c-2", 3, enrollment="e-2"))
    refused = only_reply(result)
    assert isinstance(refused, e.CreditsRefused)
    assert refused.reason == "over max_credits: 3 taken + 3 for c-2 > 5"
    assert events(result.outbound) == [refused]
    assert taken(driver) == (0, 3)
    again = only_reply(driver(hold("c-2", 3, enrollment="e-2")))  # a repeat: same answer
    assert isinstance(again, e.CreditsRefused) and "over max_credits" in again.reason


def test_exactly_max_credits_is_allowed():
    driver = student(6)
    driver(hold("c-1", 3))
    assert isinstance(only_reply(driver(hold("c-2", 3, enrollment="e-2"))), e.CreditsHeld)
    assert taken(driver) == (0, 6)


def test_an_unknown_student_is_refused_with_a_reply_only():
    driver = Driver(STUDENT)
    result = driver(hold("c-1", 1))
    refused = only_reply(result)
    assert isinstance(refused, e.CreditsRefused)
    assert refused.reason == "unknown student s-1"
    assert events(result.outbound) == []


@pytest.mark.parametrize("confirmed", [False, True])
def test_a_second_enrollment_in_the_same_course_is_refused(confirmed):
    driver = student(20)
    driver(hold("c-1", 2))
    if confirmed:
        driver(confirm("e-1:t0"))
    refused = only_reply(driver(hold("c-1", 2, enrollment="e-2")))
    assert isinstance(refused, e.CreditsRefused)
    assert refused.reason == "s-1 is already enrolled in c-1"


def test_repeats_are_answered_and_change_nothing():
    driver = student(10)
    driver(hold("c-1", 4))
    before = driver.state
    result = driver(hold("c-1", 4))
    assert isinstance(only_reply(result), e.CreditsHeld)
    assert events(result.outbound) == [] and driver.state == before
    driver(confirm("e-1:t0"))
    again = driver(confirm("e-1:t0"))
    assert isinstance(only_reply(again), e.CreditsConfirmed)
    assert events(again.outbound) == []
    assert isinstance(only_reply(driver(hold("c-1", 4))), e.CreditsConfirmed)


def test_a_confirm_of_nothing_held_is_refused():
    driver = student(10)
    refused = only_reply(driver(confirm("e-1:t0")))
    assert isinstance(refused, e.CreditsConfirmRefused)
    assert refused.reason == "unknown reservation"


def test_release_gives_back_held_or_confirmed_credits_once():
    driver = student(10)
    driver(hold("c-1", 4))
    cancelled = only_reply(driver(release("e-1:t0")))
    assert isinstance(cancelled, e.CreditsReleased) and cancelled.reason == "cancelled"
    assert taken(driver) == (0, 0)
    driver(hold("c-2", 3, enrollment="e-2"))
    driver(confirm("e-2:t0"))
    refunded = only_reply(driver(release("e-2:t0")))
    assert isinstance(refunded, e.CreditsReleased) and refunded.reason == "refunded"
    assert driver(release("e-2:t0")).outbound == ()
    assert taken(driver) == (0, 0)


def test_a_release_before_its_hold_leaves_a_tombstone_that_refuses_the_hold():
    driver = student(10)
    assert driver(release("e-1:t0")).outbound == ()
    refused = only_reply(driver(hold("c-1", 4)))
    assert isinstance(refused, e.CreditsRefused)
    assert refused.reason == "released before it was held"
    assert taken(driver) == (0, 0)


def test_a_transfer_holds_only_the_difference_and_confirming_swaps_the_courses():
    driver = student(6)
    driver(hold("c-1", 2))
    driver(confirm("e-1:t0"))
    held = only_reply(driver(hold("c-2", 5, attempt=1, replaces="e-1:t0")))
    assert isinstance(held, e.CreditsHeld) and held.held == 3
    assert taken(driver) == (2, 3)
    confirmed = only_reply(driver(confirm("e-1:t1")))
    assert isinstance(confirmed, e.CreditsConfirmed)
    assert confirmed.enrollments == (
        e.StudentEnrollment(enrollment_id="e-1", course_id="c-2", credits=5, status="enrolled"),
    )
    assert taken(driver) == (5, 0)
    assert driver(release("e-1:t0")).outbound == ()  # the replaced one is gone for good


def test_a_transfer_to_fewer_credits_holds_nothing_and_one_beyond_the_limit_is_refused():
    driver = student(6)
    driver(hold("c-1", 4))
    driver(confirm("e-1:t0"))
    down = only_reply(driver(hold("c-2", 1, attempt=1, replaces="e-1:t0")))
    assert isinstance(down, e.CreditsHeld) and down.held == 0
    driver(release("e-1:t1"))
    up = only_reply(driver(hold("c-3", 7, attempt=2, replaces="e-1:t0")))
    assert isinstance(up, e.CreditsRefused)
    assert up.reason == "over max_credits: 4 taken + 3 for c-3 > 6"


def test_max_credits_below_the_credits_taken_is_refused():
    driver = student(10)
    driver(hold("c-1", 4))
    driver(confirm("e-1:t0"))
    driver(hold("c-2", 3, enrollment="e-2"))
    result = driver(set_student(6))
    [refused] = events(result.outbound)
    assert isinstance(refused, e.StudentChangeRefused)
    assert refused.reason == "7 credits are taken; max_credits cannot go below that"
    assert driver.state.max_credits == 10
    driver(set_student(7, name="Ada L."))
    assert (driver.state.max_credits, driver.state.name) == (7, "Ada L.")


def test_a_student_takes_at_most_so_many_enrollments_yet_may_still_transfer():
    driver = Driver(StudentCredits(max_enrollments=2))
    driver(set_student(10))
    driver(hold("c-1", 0))
    driver(hold("c-2", 0, enrollment="e-2"))
    refused = only_reply(driver(hold("c-3", 0, enrollment="e-3")))
    assert isinstance(refused, e.CreditsRefused)
    assert refused.reason == "s-1 has 2 enrollments already"
    driver(confirm("e-1:t0"))
    moved = only_reply(driver(hold("c-3", 0, attempt=1, replaces="e-1:t0")))
    assert isinstance(moved, e.CreditsHeld)


def test_finished_reservations_are_remembered_for_the_retention_then_forgotten():
    driver = Driver(StudentCredits(retention=timedelta(seconds=10)))
    driver(set_student(10), at(0))
    driver(hold("c-1", 4), at(0))
    driver(release("e-1:t0"), at(0))
    repeat = only_reply(driver(confirm("e-1:t0"), at(5)))
    assert isinstance(repeat, e.CreditsConfirmRefused) and repeat.reason == "released (cancelled)"
    driver(hold("c-2", 1, enrollment="e-2"), at(11))
    driver(release("e-2:t0"), at(11))  # closes one more at 11 s: e-1's (at 0) is past 10 s
    assert list(driver.state.closed) == ["e-2:t0"]
    assert only_reply(driver(confirm("e-1:t0"), at(11))).reason == "unknown reservation"


def test_a_student_record_stored_before_ages_still_reads():
    old = (
        '{"exists": true, "name": "Ada", "max_credits": 10,'
        ' "closed": {"e-1:t0": "released (cancelled)"}}'
    )
    state = StudentState.model_validate_json(old)
    assert state.closed["e-1:t0"] == Finished("released (cancelled)", 0)
    assert StudentState.model_validate_json(state.model_dump_json()) == state
