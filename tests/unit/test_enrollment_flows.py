"""Enrollment sagas, courses and students together on the in-memory bus: every message goes
through its wire format and is delivered in order per channel, as Kafka would per key."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.contracts import enrollment as e
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.machinery.process import Outbound
from sagas.participants.course import CourseSeats, CourseState
from sagas.participants.student import StudentCredits, StudentState

from .helpers import T0, Bus, at, envelope

pytestmark = pytest.mark.unit


def world(courses: dict[str, tuple[int, int]], students: dict[str, int]) -> Bus:
    """Courses (id -> (capacity, credits)) and students (id -> max_credits), all set."""
    bus = Bus.of(EnrollmentSaga(), CourseSeats(), StudentCredits())
    for course, (capacity, credits) in courses.items():
        set_course(bus, course, capacity, credits)
    for student, max_credits in students.items():
        bus.send(
            STUDENT, envelope(e.SetStudent(name=student, max_credits=max_credits), key=student)
        )
    return bus


def set_course(bus: Bus, course: str, capacity: int, credits: int = 3) -> None:
    message = e.SetCourse(title=course, capacity=capacity, credits=credits)
    bus.send(COURSE, envelope(message, key=course))


def enroll(bus: Bus, enrollment: str, student: str, course: str, waitlist: bool = True) -> None:
    message = e.Enroll(student_id=student, course_id=course, waitlist=waitlist)
    bus.send(ENROLLMENT_SAGA, envelope(message, key=enrollment))


def drop(bus: Bus, enrollment: str, now: datetime = T0) -> None:
    bus.send(ENROLLMENT_SAGA, envelope(e.Drop(), key=enrollment), now)


def transfer(bus: Bus, enrollment: str, course: str) -> None:
    bus.send(ENROLLMENT_SAGA, envelope(e.Transfer(course_id=course), key=enrollment))


def saga(bus: Bus, enrollment: str) -> Any:
    return bus.state(ENROLLMENT_SAGA, enrollment)


def status(bus: Bus, enrollment: str) -> tuple[str, str, int | None]:
    state = saga(bus, enrollment)
    return state.status, state.course_id, state.position


def course(bus: Bus, course_id: str) -> CourseState:
    state: CourseState = bus.state(COURSE, course_id)
    return state


def student(bus: Bus, student_id: str) -> StudentState:
    state: StudentState = bus.state(STUDENT, student_id)
    return state


def waitlist(bus: Bus, course_id: str) -> list[tuple[str, int]]:
    return [(q.enrollment_id, i) for i, q in enumerate(course(bus, course_id).waitlist, 1)]


def last_roster(bus: Bus, course_id: str) -> e.CourseFact:
    facts = [
        m
        for env in bus.published
        if env.key == f"course:{course_id}" and isinstance(m := env.message(), e.CourseFact)
    ]
    return facts[-1]


# --- the waitlist ------------------------------------------------------------------------


def test_a_full_course_waitlists_and_a_drop_enrolls_the_first_in_line():
    bus = world({"c": (2, 3)}, {f"s{i}": 9 for i in range(5)})
    for i in range(5):
        enroll(bus, f"e{i}", f"s{i}", "c")
    assert [status(bus, f"e{i}") for i in range(5)] == [
        ("ENROLLED", "c", None),
        ("ENROLLED", "c", None),
        ("WAITLISTED", "c", 1),
        ("WAITLISTED", "c", 2),
        ("WAITLISTED", "c", 3),
    ]
    drop(bus, "e0")
    assert [status(bus, f"e{i}") for i in range(5)] == [
        ("DROPPED", "c", None),
        ("ENROLLED", "c", None),
        ("ENROLLED", "c", None),
        ("WAITLISTED", "c", 1),
        ("WAITLISTED", "c", 2),
    ]
    roster = last_roster(bus, "c")
    assert (roster.enrolled, roster.held) == (("s1", "s2"), 0)
    assert [(w.enrollment_id, w.student_id, w.position) for w in roster.waitlist] == [
        ("e3", "s3", 1),
        ("e4", "s4", 2),
    ]
    assert student(bus, "s0").credits_used == 0
    assert student(bus, "s2").credits_used == 3


def test_a_promoted_enrollment_whose_student_check_now_fails_is_rejected_and_the_next_promoted():
    bus = world({"c": (1, 3), "other": (5, 3)}, {"s0": 9, "s1": 3, "s2": 9})
    enroll(bus, "e0", "s0", "c")
    enroll(bus, "e1", "s1", "c")
    enroll(bus, "e2", "s2", "c")
    enroll(bus, "x1", "s1", "other")  # s1 spends their credits while waiting
    assert status(bus, "x1")[0] == "ENROLLED"
    drop(bus, "e0")
    assert saga(bus, "e1").status == "REJECTED"
    assert saga(bus, "e1").reason == "over max_credits: 3 taken + 3 for c > 3"
    assert status(bus, "e2") == ("ENROLLED", "c", None)
    assert course(bus, "c").enrolled == {"e2:t0": "s2"}
    assert (course(bus, "c").held, course(bus, "c").waitlist) == (0, ())


def test_a_dropped_waitlisted_enrollment_leaves_the_queue_and_those_behind_move_up():
    bus = world({"c": (1, 3)}, {f"s{i}": 9 for i in range(5)})
    for i in range(5):
        enroll(bus, f"e{i}", f"s{i}", "c")
    drop(bus, "e2")
    assert [status(bus, f"e{i}")[2] for i in range(1, 5)] == [1, None, 2, 3]
    assert status(bus, "e2")[0] == "DROPPED"
    assert waitlist(bus, "c") == [("e1", 1), ("e3", 2), ("e4", 3)]
    assert course(bus, "c").enrolled == {"e0:t0": "s0"}  # nobody promoted: no seat freed


def test_waitlist_false_on_a_full_course_is_rejected():
    bus = world({"c": (1, 3)}, {"s0": 9, "s1": 9})
    enroll(bus, "e0", "s0", "c")
    enroll(bus, "e1", "s1", "c", waitlist=False)
    assert (saga(bus, "e1").status, saga(bus, "e1").reason) == ("REJECTED", "course full")
    assert course(bus, "c").waitlist == ()


def test_a_student_over_max_credits_is_rejected_and_the_seat_released():
    bus = world({"c": (1, 5)}, {"s0": 4, "s1": 9})
    enroll(bus, "e0", "s0", "c")
    assert saga(bus, "e0").status == "REJECTED"
    assert "over max_credits" in saga(bus, "e0").reason
    assert (course(bus, "c").held, course(bus, "c").enrolled) == (0, {})
    enroll(bus, "e1", "s1", "c")
    assert saga(bus, "e1").status == "ENROLLED"


def test_an_unknown_student_or_course_is_rejected_with_the_reason():
    bus = world({"c": (1, 3)}, {"s0": 9})
    enroll(bus, "e0", "ghost", "c")
    enroll(bus, "e1", "s0", "nowhere")
    assert (saga(bus, "e0").status, saga(bus, "e0").reason) == (
        "REJECTED",
        "unknown student ghost",
    )
    assert (saga(bus, "e1").status, saga(bus, "e1").reason) == (
        "REJECTED",
        "unknown course nowhere",
    )
    assert course(bus, "c").held == 0


def test_a_hundred_students_race_for_thirty_seats_then_five_drop():
    bus = world({"c": (30, 1)}, {f"s{i}": 9 for i in range(100)})
    for i in range(100):
        enroll(bus, f"e{i:03}", f"s{i}", "c")
    states = [status(bus, f"e{i:03}") for i in range(100)]
    assert [s for s, _, _ in states] == ["ENROLLED"] * 30 + ["WAITLISTED"] * 70
    assert [p for _, _, p in states[30:]] == list(range(1, 71))
    for i in range(5):
        drop(bus, f"e{i:03}")
    states = [status(bus, f"e{i:03}") for i in range(100)]
    assert [s for s, _, _ in states[5:40]] == ["ENROLLED"] * 30 + ["WAITLISTED"] * 5
    assert [p for _, _, p in states[35:]] == list(range(1, 66))
    assert len(course(bus, "c").enrolled) == 30


# --- transfers ----------------------------------------------------------------------------


def test_a_transfer_moves_the_student_and_promotes_the_old_course_s_waitlist():
    bus = world({"a": (1, 2), "b": (1, 4)}, {"s0": 6, "s1": 6})
    enroll(bus, "e0", "s0", "a")
    enroll(bus, "e1", "s1", "a")
    transfer(bus, "e0", "b")
    assert status(bus, "e0") == ("ENROLLED", "b", None)
    assert status(bus, "e1") == ("ENROLLED", "a", None)
    assert course(bus, "b").enrolled == {"e0:t1": "s0"}
    assert (student(bus, "s0").credits_used, student(bus, "s0").credits_held) == (4, 0)


def test_a_transfer_into_a_full_course_keeps_the_old_seat():
    bus = world({"a": (1, 2), "b": (1, 2)}, {"s0": 9, "s1": 9})
    enroll(bus, "e0", "s0", "a")
    enroll(bus, "e1", "s1", "b")
    before = course(bus, "a")
    transfer(bus, "e0", "b")
    assert status(bus, "e0") == ("ENROLLED", "a", None)
    assert saga(bus, "e0").reason == "transfer to b refused: course full"
    assert course(bus, "a") == before
    assert course(bus, "b").waitlist == ()  # transfers never join a waitlist


def test_a_transfer_refused_for_credits_gives_the_new_seat_back_and_keeps_the_old():
    bus = world({"a": (1, 2), "b": (1, 5)}, {"s0": 4})
    enroll(bus, "e0", "s0", "a")
    transfer(bus, "e0", "b")
    assert status(bus, "e0") == ("ENROLLED", "a", None)
    assert (
        saga(bus, "e0").reason == "transfer to b refused: over max_credits: 2 taken + 3 for b > 4"
    )
    assert (course(bus, "b").held, course(bus, "b").enrolled) == (0, {})
    assert course(bus, "a").enrolled == {"e0:t0": "s0"}
    assert (student(bus, "s0").credits_used, student(bus, "s0").credits_held) == (2, 0)


def test_two_students_transferring_into_the_last_seat_at_once_one_moves_the_other_stays():
    bus = world({"a": (2, 2), "b": (1, 2)}, {"s0": 9, "s1": 9})
    enroll(bus, "e0", "s0", "a")
    enroll(bus, "e1", "s1", "a")
    bus.paused.add(COURSE)
    transfer(bus, "e0", "b")
    transfer(bus, "e1", "b")
    bus.resume(COURSE)
    assert status(bus, "e0") == ("ENROLLED", "b", None)
    assert status(bus, "e1") == ("ENROLLED", "a", None)
    assert saga(bus, "e1").reason == "transfer to b refused: course full"
    assert course(bus, "a").enrolled == {"e1:t0": "s1"}
    assert course(bus, "b").enrolled == {"e0:t1": "s0"}


def test_a_transfer_whose_old_seat_release_arrives_after_a_drop_of_the_same_enrollment():
    bus = world({"a": (1, 2), "b": (1, 2)}, {"s0": 9, "s9": 9})
    enroll(bus, "e0", "s0", "a")
    enroll(bus, "e9", "s9", "a")  # waits for e0's seat in a

    def old_seat_release(out: Outbound) -> bool:
        message = out.envelope.message()
        return isinstance(message, e.ReleaseSeat) and message.reservation_id == "e0:t0"

    bus.hold = old_seat_release
    transfer(bus, "e0", "b")
    assert saga(bus, "e0").status == "TRANSFERRING"  # committed; the old seat's release held
    drop(bus, "e0")
    assert saga(bus, "e0").status == "DROPPED"
    bus.hold = None
    bus.resume(COURSE)  # the transfer's release, then the drop's, reach course a
    assert saga(bus, "e0").status == "DROPPED"
    assert status(bus, "e9") == ("ENROLLED", "a", None)  # promoted exactly once
    assert course(bus, "a").enrolled == {"e9:t0": "s9"}
    assert (course(bus, "a").held, course(bus, "a").waitlist) == (0, ())
    assert (course(bus, "b").held, course(bus, "b").enrolled) == (0, {})
    assert (student(bus, "s0").credits_used, student(bus, "s0").credits_held) == (0, 0)


def test_a_saga_stuck_at_its_student_check_times_out_gives_the_seat_back_and_promotes():
    bus = world({"c": (1, 3)}, {"s0": 9, "s1": 9})
    bus.paused.add(STUDENT)
    enroll(bus, "e0", "s0", "c")
    bus.paused.discard(STUDENT)
    enroll(bus, "e1", "s1", "c")
    assert saga(bus, "e1").status == "WAITLISTED"
    bus.tick(at(30))  # the saga's step times out first: it gives the seat back
    assert saga(bus, "e0").status == "REJECTED"
    assert status(bus, "e1") == ("ENROLLED", "c", None)
    # The stuck hold lands after its release (a tombstone by then): it is refused.
    bus.resume(STUDENT)
    assert (student(bus, "s0").credits_used, student(bus, "s0").credits_held) == (0, 0)
