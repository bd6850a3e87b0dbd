"""The enrollment invariants over random command sequences (fixed seeds, so a failure
replays): per course, confirmed + held seats <= capacity and a waitlist only while no seat is
free; per student, confirmed + held credits <= max_credits; checked after every decision.
Channels are paused and resumed at random, so replies cross commands, and time moves so
holds expire and steps time out. Once everything is delivered and every deadline has passed,
each enrollment holds exactly what its status says: one confirmed seat and its credits when
``ENROLLED``, a place in the queue when ``WAITLISTED``, nothing when it ended."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.contracts import enrollment as e
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.machinery.record import Record
from sagas.machinery.step import StepResult, step
from sagas.messages import Envelope
from sagas.participants.course import CourseSeats, CourseState
from sagas.participants.student import StudentCredits, StudentState

from .helpers import T0, Bus, envelope

pytestmark = pytest.mark.unit

COURSES = ("a", "b", "c", "d")
STUDENTS = tuple(f"s{i}" for i in range(12))
CHANNELS = (ENROLLMENT_SAGA, COURSE, STUDENT)


def check_course(key: str, state: CourseState) -> None:
    taken = len(state.enrolled) + state.held
    assert taken <= state.capacity, f"course {key}: {taken} seats taken of {state.capacity}"
    assert set(state.holders) == set(state.seats.holds), f"course {key}: holders out of step"
    if state.waitlist:
        assert state.seats.available == 0, f"course {key}: a free seat and a waitlist"


def check_student(key: str, state: StudentState) -> None:
    taken = state.credits_used + state.credits_held
    assert taken <= state.max_credits, f"student {key}: {taken} of {state.max_credits} credits"


def checked_step(process: Any, record: Record[Any] | None, env: Envelope, now: Any) -> StepResult:
    result = step(process, record, env, now)
    if isinstance(process, CourseSeats):
        check_course(env.key, result.record.state)
    elif isinstance(process, StudentCredits):
        check_student(env.key, result.record.state)
    return result


class CheckedBus(Bus):
    def _deliver(self, channel: str, env: Envelope, now: Any) -> None:
        process = self.processes[channel]
        result = checked_step(process, self.records.get((channel, env.key)), env, now)
        self.store(channel, env.key, result.record)
        self._queue.extend(result.outbound)


def _status(bus: Bus, enrollment: str) -> str | None:
    record = bus.records.get((ENROLLMENT_SAGA, enrollment))
    return None if record is None else record.state.status


def run_randomly(seed: int, steps: int) -> CheckedBus:
    rng = random.Random(seed)
    bus = CheckedBus.of(EnrollmentSaga(), CourseSeats(), StudentCredits())
    now = T0
    enrollments: list[str] = []
    for course in COURSES:
        message = e.SetCourse(title=course, capacity=rng.randint(0, 3), credits=rng.randint(1, 4))
        bus.send(COURSE, envelope(message, key=course), now)
    for student in STUDENTS:
        message = e.SetStudent(name=student, max_credits=rng.randint(3, 9))
        bus.send(STUDENT, envelope(message, key=student), now)
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.35:
            enrollment = f"e{len(enrollments)}"
            enrollments.append(enrollment)
            message = e.Enroll(
                student_id=rng.choice(STUDENTS),
                course_id=rng.choice(COURSES),
                waitlist=rng.random() < 0.8,
            )
            bus.send(ENROLLMENT_SAGA, envelope(message, key=enrollment), now)
        elif roll < 0.5 and enrollments:
            bus.send(ENROLLMENT_SAGA, envelope(e.Drop(), key=rng.choice(enrollments)), now)
        elif roll < 0.65 and enrollments:
            # Mostly an enrolled one (else it is refused), sometimes any.
            enrolled = [k for k in enrollments if _status(bus, k) == "ENROLLED"]
            chosen = rng.choice(enrolled if enrolled and rng.random() < 0.8 else enrollments)
            message = e.Transfer(course_id=rng.choice(COURSES))
            bus.send(ENROLLMENT_SAGA, envelope(message, key=chosen), now)
        elif roll < 0.72:
            course = rng.choice(COURSES)
            message = e.SetCourse(
                title=course, capacity=rng.randint(0, 4), credits=rng.randint(1, 4)
            )
            bus.send(COURSE, envelope(message, key=course), now)
        elif roll < 0.76:
            student = rng.choice(STUDENTS)
            message = e.SetStudent(name=student, max_credits=rng.randint(2, 9))
            bus.send(STUDENT, envelope(message, key=student), now)
        elif roll < 0.86:
            bus.paused.add(rng.choice(CHANNELS))
        elif roll < 0.94:
            bus.resume(rng.choice(CHANNELS), now)
        else:
            now += timedelta(seconds=rng.choice((1, 10, 31, 301)))
            bus.tick(now)
    for channel in CHANNELS:
        bus.resume(channel, now)
    for _ in range(4):  # past every hold's TTL and every step's timeout, and their echoes
        now += timedelta(minutes=10)
        bus.tick(now)
    return bus


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
def test_random_commands_keep_every_invariant_and_settle_consistently(seed: int) -> None:
    bus = run_randomly(seed, steps=250)
    sagas = {k: r.state for (ch, k), r in bus.records.items() if ch == ENROLLMENT_SAGA}
    statuses = [s.status for s in sagas.values()]
    assert all(s in EnrollmentSaga.STATUSES.settled for s in statuses if s), statuses
    assert {"ENROLLED", "WAITLISTED", "REJECTED", "DROPPED"} & set(statuses)

    def rid(enrollment: str) -> str:
        seat = sagas[enrollment].seat
        assert seat is not None
        return seat.rid

    for course_id in COURSES:
        state: CourseState = bus.state(COURSE, course_id)
        assert state.holders == {}, f"course {course_id}: holds outlived every TTL"
        enrolled = {
            rid(k): s.student_id
            for k, s in sagas.items()
            if s.status == "ENROLLED" and s.course_id == course_id
        }
        assert state.enrolled == enrolled, f"course {course_id}"
        queued = {
            rid(k)
            for k, s in sagas.items()
            if s.status == "WAITLISTED" and s.course_id == course_id
        }
        assert {q.reservation_id for q in state.waitlist} == queued, f"course {course_id}"
        positions = {
            rid(k): s.position
            for k, s in sagas.items()
            if s.status == "WAITLISTED" and s.course_id == course_id
        }
        assert positions == {q.reservation_id: i for i, q in enumerate(state.waitlist, 1)}
    for student_id in STUDENTS:
        credits: StudentState = bus.state(STUDENT, student_id)
        assert credits.holds == {}, f"student {student_id}: credits held by nobody"
        mine = {
            rid(k): s.course_id
            for k, s in sagas.items()
            if s.status == "ENROLLED" and s.student_id == student_id
        }
        assert {r: c.course_id for r, c in credits.enrolled.items()} == mine, student_id
