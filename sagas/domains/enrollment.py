"""Course enrollment: the enrollment saga holds a seat and a student's credits, then
confirms both (or releases them); enrollments, course rosters and students' enrollments as
read models."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from sagas.contracts import enrollment
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.machinery.domain import Cancellation, Domain, ProcessChannel
from sagas.machinery.process import Process
from sagas.participants.course import CourseSeats
from sagas.participants.student import StudentCredits
from sagas.projections.declare import SagaType
from sagas.projections.enrollments import ENROLLMENTS
from sagas.projections.roster import COURSE_ROSTER
from sagas.projections.students import STUDENT_ENROLLMENTS

ENROLLMENT_SAGA, COURSE, STUDENT = "enrollment-saga", "course", "student"


class EnrollmentSettings(Protocol):
    """The settings the enrollment domain's processes read."""

    @property
    def step_timeout_s(self) -> float: ...
    @property
    def reservation_ttl_s(self) -> float: ...
    @property
    def dedupe_retention_s(self) -> float: ...


def processes(settings: EnrollmentSettings) -> list[Process[Any]]:
    retention = timedelta(seconds=settings.dedupe_retention_s)
    # A seat hold expires like a stock reservation; a step times out like an order's.
    saga = EnrollmentSaga(
        name=ENROLLMENT_SAGA,
        courses=COURSE,
        students=STUDENT,
        step_timeout=timedelta(seconds=settings.step_timeout_s),
        seat_ttl=timedelta(seconds=settings.reservation_ttl_s),
    )
    return [
        saga,
        CourseSeats(name=COURSE, retention=retention),
        StudentCredits(name=STUDENT, retention=retention),
    ]


DOMAIN = Domain(
    name="enrollment",
    contracts=(enrollment,),
    channels=(
        ProcessChannel(ENROLLMENT_SAGA, EnrollmentSaga),
        ProcessChannel(COURSE, CourseSeats),
        ProcessChannel(STUDENT, StudentCredits),
    ),
    processes=processes,
    read_models=(ENROLLMENTS, COURSE_ROSTER, STUDENT_ENROLLMENTS),
    saga_types=(
        SagaType(entity_type="enrollment", statuses=EnrollmentSaga.STATUSES, model=ENROLLMENTS),
    ),
    cancellations=(
        Cancellation(
            "enrollment",
            lambda reason: enrollment.Drop(reason=reason),
            lambda row: enrollment.Enroll(student_id=row.student_id, course_id=row.course_id),
        ),
    ),
    demo="sagaline.enrollment_demo",
    api="services.api.enrollments",
    two_typed_fields={"waitlist": "a flag on enrollment.Requested, a queue on every course fact"},
)
