"""Legacy enrollments driving the enrollment domain: the ``legacy-domain`` process on a bus
with the real enrollment saga, course and student participants."""

from __future__ import annotations

import pytest

from sagas.contracts import enrollment as e
from sagas.contracts import legacy as lg
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.legacy_domain import LegacyDomain, enrollment_id
from sagas.machinery.process import Outbound
from sagas.participants.course import CourseSeats
from sagas.participants.student import StudentCredits

from .helpers import Bus, envelope

pytestmark = pytest.mark.unit

DOMAIN = "legacy-domain"
S, C = "s-jhon", "c-physics"
STUDENT = lg.StudentRow(id=S, name="Jhon", email="jhon@school.test", max_credits=20)
COURSE = lg.CourseRow(id=C, title="Physics", teacher="Curie", capacity=30, credits=5)
E = enrollment_id(S, C, (762,))


def bus() -> Bus:
    return Bus.of(LegacyDomain(), EnrollmentSaga(), CourseSeats(), StudentCredits())


def enrolled(
    student: lg.StudentRow | None = STUDENT,
    course: lg.CourseRow | None = COURSE,
    tx_ids: tuple[int, ...] = (762,),
    student_id: str = S,
    course_id: str = C,
) -> lg.StudentEnrolled:
    return lg.StudentEnrolled(
        student_id=student_id,
        course_id=course_id,
        student=student,
        course=course,
        student_created=True,
        course_created=True,
        tx_ids=tx_ids,
    )


def dropped(tx_ids: tuple[int, ...] = (769,), course_id: str = C) -> lg.EnrollmentDropped:
    return lg.EnrollmentDropped(student_id=S, course_id=course_id, tx_ids=tx_ids)


def published(b: Bus, type_: str) -> list[lg.Message]:
    return [env.message() for env in b.published if env.type == type_]


def test_a_legacy_enrollment_upserts_course_and_student_then_enrolls() -> None:
    b = bus()
    b.send(DOMAIN, envelope(enrolled(), key=S))
    course = b.state("course", C)
    assert (course.capacity, course.credits, course.title) == (30, 5, "Physics")
    assert list(course.enrolled.values()) == [S]
    assert b.state("student", S).max_credits == 20
    assert b.state("enrollment-saga", E).status == "ENROLLED"
    assert published(b, "legacy.EnrollmentMirrored") == [
        lg.EnrollmentMirrored(student_id=S, course_id=C, enrollment_id=E, tx_ids=(762,))
    ]
    # The mirrored fact, the upserts and the saga's facts all show in the saga's timeline.
    assert {env.saga_id for env in b.published if env.type != "legacy.NotMirrored"} == {E}


def test_the_same_legacy_action_twice_starts_one_enrollment() -> None:
    b = bus()
    b.send(DOMAIN, envelope(enrolled(), key=S))
    b.send(DOMAIN, envelope(enrolled(), key=S))  # another message id, the same action
    sagas = [key for (channel, key) in b.records if channel == "enrollment-saga"]
    assert sagas == [E]
    assert len(published(b, "enrollment.Requested")) == 1
    assert len(published(b, "legacy.EnrollmentMirrored")) == 1


def test_the_enroll_waits_for_both_upserts_to_be_answered() -> None:
    """The seat request must not reach the course before its capacity: until the course
    and the student have answered their Set, no Enroll is sent."""
    b = bus()
    b.hold = lambda out: out.envelope.type in ("course.CourseSet", "student.StudentSet")
    b.send(DOMAIN, envelope(enrolled(), key=S))
    assert b.state("course", C).capacity == 30  # the Set was decided ...
    assert not [k for (ch, k) in b.records if ch == "enrollment-saga"]  # ... no Enroll yet
    held: list[Outbound] = b._held
    assert sorted(o.envelope.type for o in held) == ["course.CourseSet", "student.StudentSet"]
    b.hold = None
    b.resume(DOMAIN)
    assert b.state("enrollment-saga", E).status == "ENROLLED"


def test_a_legacy_drop_drops_the_enrollment_and_frees_the_seat() -> None:
    b = bus()
    b.send(DOMAIN, envelope(enrolled(), key=S))
    b.send(DOMAIN, envelope(dropped(), key=S))
    assert b.state("enrollment-saga", E).status == "DROPPED"
    assert b.state("course", C).enrolled == {}
    assert b.state(DOMAIN, S).enrollments == {}


def test_a_drop_before_the_upserts_are_answered_ends_the_enrollment_unstarted() -> None:
    b = bus()
    b.hold = lambda out: out.envelope.type == "course.CourseSet"
    b.send(DOMAIN, envelope(enrolled(), key=S))
    b.send(DOMAIN, envelope(dropped(), key=S))
    b.hold = None
    b.resume(DOMAIN)
    assert b.state("enrollment-saga", E).status == "DROPPED"
    assert b.state("course", C).enrolled == {}
    assert published(b, "enrollment.Requested") == []


def test_enrolling_again_after_a_drop_is_a_new_enrollment() -> None:
    b = bus()
    b.send(DOMAIN, envelope(enrolled(), key=S))
    b.send(DOMAIN, envelope(dropped(), key=S))
    b.send(DOMAIN, envelope(enrolled(tx_ids=(900,)), key=S))
    again = enrollment_id(S, C, (900,))
    assert again != E
    assert b.state("enrollment-saga", again).status == "ENROLLED"
    assert list(b.state("course", C).enrolled.values()) == [S]


def test_ids_the_domain_refuses_are_not_mirrored_and_say_why() -> None:
    b = bus()
    b.send(DOMAIN, envelope(enrolled(student_id="Jhon Smith"), key="Jhon Smith"))
    (fact,) = published(b, "legacy.NotMirrored")
    assert isinstance(fact, lg.NotMirrored)
    assert fact.action == "enroll" and "does not match" in fact.reason
    assert [ch for (ch, _) in b.records] == [DOMAIN]  # nothing else was asked


def test_a_drop_of_an_enrollment_never_mirrored_is_said_and_changes_nothing() -> None:
    b = bus()
    b.send(DOMAIN, envelope(dropped(), key=S))
    (fact,) = published(b, "legacy.NotMirrored")
    assert isinstance(fact, lg.NotMirrored) and fact.action == "drop"
    assert [ch for (ch, _) in b.records] == [DOMAIN]


def test_without_a_usable_course_row_the_course_is_not_upserted() -> None:
    """A course the domain does not know refuses the seat; one it knows is enrolled into."""
    b = bus()
    b.send(DOMAIN, envelope(enrolled(course=None), key=S))
    assert b.state("enrollment-saga", E).status == "REJECTED"
    b.send("course", envelope(e.SetCourse(title="Physics", capacity=2, credits=5), key=C))
    unusable = COURSE.model_copy(update={"capacity": 5000})  # over MAX_SEATS
    b.send(DOMAIN, envelope(enrolled(course=unusable, tx_ids=(901,)), key=S))
    assert b.state("course", C).capacity == 2
    assert b.state("enrollment-saga", enrollment_id(S, C, (901,))).status == "ENROLLED"


def test_other_business_events_leave_the_domain_alone() -> None:
    b = bus()
    updated = lg.StudentUpdated(
        student_id=S, student=STUDENT, changed=("email",), created=False, tx_ids=(767,)
    )
    b.send(DOMAIN, envelope(updated, key=S))
    assert b.published == [] and list(b.records) == []  # nothing stored for a no-op
