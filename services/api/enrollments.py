"""Course enrollment: courses, students and enrollments, their commands and their reads.

Commands go to the processes' channels (``sagas.catalog``): a course's and a student's
settings to the participant keyed by that id, everything about an enrollment to the
enrollment saga keyed by the enrollment id. Reads go through the read-model declarations,
like orders (``services.api.queries``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from sqlalchemy import Connection

from readside import queries
from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT, saga_type
from sagas.contracts import enrollment as e
from sagas.ids import external_command_id
from sagas.messages import Message
from sagas.projections.enrollments import ENROLLMENTS, EnrollmentRow
from sagas.projections.roster import COURSE_ROSTER
from sagas.projections.students import STUDENT_ENROLLMENTS, StudentRow
from services.api.body import StrictJsonRoute
from services.api.commands import accepted, dispatch
from services.api.deps import BusDep, IdempotencyKey, claim
from services.api.enrollment_models import (
    CourseAccepted,
    CourseRequest,
    DropAccepted,
    EnrollmentAccepted,
    EnrollmentPublic,
    EnrollRequest,
    RosterPublic,
    StudentAccepted,
    StudentEnrollmentsPublic,
    StudentRequest,
    TransferAccepted,
    TransferRequest,
)
from services.api.errors import documented
from services.api.queries import (
    ERRORS,
    EngineDep,
    ReadAfterDep,
    WatchDep,
    not_found,
    read_query,
    row_or_404,
)
from services.api.requests import ENTITY_ID
from services.bus import CommandBus

# Commands and queries on separate routers: the API guards each group with its own scope.
enrollment_commands, course_commands, student_commands, enrollments, courses, students = (
    APIRouter(prefix=f"/{name}", tags=[name], route_class=StrictJsonRoute)
    for name in ("enrollments", "courses", "students") * 2
)
# The enrollment domain's routers (its API module, named by sagas.domains.enrollment).
COMMAND_ROUTERS = (enrollment_commands, course_commands, student_commands)
QUERY_ROUTERS = (enrollments, courses, students)
TAGS = (
    {"name": "enrollments", "description": "Enroll, drop, transfer; read an enrollment"},
    {"name": "courses", "description": "Create or change a course; its roster and waitlist"},
    {"name": "students", "description": "Create or change a student; their credits"},
)

_ENROLLMENT_SAGA = saga_type(ENROLLMENTS.entity_type)
CourseId = Annotated[str, Path(min_length=1, max_length=e.MAX_ID, pattern=ENTITY_ID)]
StudentId = Annotated[str, Path(min_length=1, max_length=e.MAX_ID, pattern=ENTITY_ID)]
EnrollmentId = Annotated[str, Path(min_length=1, max_length=e.MAX_ENROLLMENT_ID, pattern=ENTITY_ID)]
COMMAND_ERRORS = documented(400, 404, 415, 503, s404="No route matches (an id with a '/')")


# --- commands ----------------------------------------------------------------------------


@course_commands.put(
    "/{course_id}", status_code=202, response_model=CourseAccepted, responses=COMMAND_ERRORS
)
async def set_course(
    request: Request,
    course_id: CourseId,
    course: CourseRequest,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Create or change a course; a capacity below the seats taken is refused by the course
    (its roster's event says why)."""
    message_id = claim(request, f"course/{course_id}", idempotency_key, course).command()
    await dispatch(bus, COURSE, course.command(), key=course_id, message_id=message_id)
    return accepted(CourseAccepted, course_id=course_id, consistency_token=message_id)


@student_commands.put(
    "/{student_id}", status_code=202, response_model=StudentAccepted, responses=COMMAND_ERRORS
)
async def set_student(
    request: Request,
    student_id: StudentId,
    student: StudentRequest,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Create or change a student; ``max_credits`` below the credits taken is refused."""
    message_id = claim(request, f"student/{student_id}", idempotency_key, student).command()
    await dispatch(bus, STUDENT, student.command(), key=student_id, message_id=message_id)
    return accepted(StudentAccepted, student_id=student_id, consistency_token=message_id)


@enrollment_commands.post(
    "", status_code=202, response_model=EnrollmentAccepted, responses=documented(400, 415, 503)
)
async def enroll(
    request: Request, enroll: EnrollRequest, bus: BusDep, idempotency_key: IdempotencyKey = None
) -> Response:
    """Ask to enroll a student in a course: a seat, or a place on its waitlist."""
    enrollment_id = claim(request, "enrollment", idempotency_key, enroll).entity()
    message_id = external_command_id(enrollment_id, "enroll")
    await dispatch(
        bus,
        ENROLLMENT_SAGA,
        enroll.command(),
        key=enrollment_id,
        saga_id=enrollment_id,
        message_id=message_id,
    )
    return accepted(EnrollmentAccepted, enrollment_id=enrollment_id, consistency_token=message_id)


@enrollment_commands.delete(
    "/{enrollment_id}", status_code=202, response_model=DropAccepted, responses=COMMAND_ERRORS
)
async def drop(
    request: Request,
    enrollment_id: EnrollmentId,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Drop the course (from ENROLLED, WAITLISTED or under way); a drop the enrollment
    cannot take (it ended already) changes nothing and its timeline says why."""
    message_id = claim(request, f"drop/{enrollment_id}", idempotency_key, None).command()
    await _to_saga(bus, enrollment_id, e.Drop(), message_id)
    return accepted(DropAccepted, enrollment_id=enrollment_id, consistency_token=message_id)


@enrollment_commands.post(
    "/{enrollment_id}/transfer",
    status_code=202,
    response_model=TransferAccepted,
    responses=COMMAND_ERRORS,
)
async def transfer(
    request: Request,
    enrollment_id: EnrollmentId,
    move: TransferRequest,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Move an ENROLLED enrollment to another course; it keeps its seat until the new one
    is confirmed, and stays where it is (with a reason) when the move fails."""
    message_id = claim(request, f"transfer/{enrollment_id}", idempotency_key, move).command()
    await _to_saga(bus, enrollment_id, move.command(), message_id)
    return accepted(
        TransferAccepted,
        enrollment_id=enrollment_id,
        course_id=move.course_id,
        consistency_token=message_id,
    )


async def _to_saga(bus: CommandBus, enrollment_id: str, message: Message, message_id: str) -> None:
    await dispatch(
        bus,
        ENROLLMENT_SAGA,
        message,
        key=enrollment_id,
        saga_id=enrollment_id,
        message_id=message_id,
    )


# --- queries -----------------------------------------------------------------------------


@enrollments.get("/{enrollment_id}", response_model=EnrollmentPublic, responses=ERRORS)
async def get_enrollment(
    enrollment_id: EnrollmentId, engine: EngineDep, watch: WatchDep, after: ReadAfterDep
) -> EnrollmentPublic:
    """An enrollment as projected. With ``?wait=`` it first waits until its status is settled
    (not PENDING or TRANSFERRING). After a drop or a transfer the row still shows the old
    settled status until that command is projected: pass the command's consistency token."""
    await after.applied()
    if after.wait_given:
        await watch.settled(_ENROLLMENT_SAGA.key(enrollment_id), after.remaining())
    what = f"enrollment {enrollment_id!r}"
    return EnrollmentPublic.of(await row_or_404(engine, ENROLLMENTS, enrollment_id, what))


@courses.get("/{course_id}/roster", response_model=RosterPublic, responses=ERRORS)
async def get_roster(course_id: CourseId, engine: EngineDep, after: ReadAfterDep) -> RosterPublic:
    """A course: who is enrolled, how many seats are held, its waitlist in position order."""
    await after.applied()
    what = f"course {course_id!r}"
    return RosterPublic.of(await row_or_404(engine, COURSE_ROSTER, course_id, what))


@students.get(
    "/{student_id}/enrollments", response_model=StudentEnrollmentsPublic, responses=ERRORS
)
async def student_enrollments(
    student_id: StudentId,
    engine: EngineDep,
    after: ReadAfterDep,
    limit: Annotated[int, Query(ge=1, le=e.MAX_STUDENT_ENROLLMENTS, description="How many")] = 100,
) -> StudentEnrollmentsPublic:
    """A student's credits and enrollments (every status, newest first)."""
    await after.applied()
    row, rows = await read_query(engine, _student_and_enrollments, student_id, limit)
    if row is None:
        raise not_found(f"student {student_id!r}")
    return StudentEnrollmentsPublic.of(row, rows)


def _student_and_enrollments(
    conn: Connection, student_id: str, limit: int
) -> tuple[StudentRow | None, list[EnrollmentRow]]:
    student = queries.get_row(conn, STUDENT_ENROLLMENTS, student_id)
    rows = queries.rows_where(conn, ENROLLMENTS, "student_id", student_id, "created_at", limit)
    return student, rows
