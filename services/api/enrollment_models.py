"""What the enrollment routes accept and answer: request bodies that say exactly what they
take (and turn into the contract messages), and the read models as the API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from sagas.catalog import saga_type
from sagas.contracts import enrollment as e
from sagas.projections.enrollments import ENROLLMENTS, EnrollmentRow
from sagas.projections.roster import RosterRow
from sagas.projections.students import StudentRow
from services.api.commands import Accepted
from services.api.requests import ENTITY_ID, TEXT, WholeNumber

_ENROLLMENT_SAGA = saga_type(ENROLLMENTS.entity_type)
MAX_COUNT = 2**31 - 1
"""Counts are SQL INTEGER columns of the read models: a larger one is refused here."""

CourseIdField = Field(min_length=1, max_length=e.MAX_ID, pattern=ENTITY_ID)
StudentIdField = Field(min_length=1, max_length=e.MAX_ID, pattern=ENTITY_ID)


# --- request bodies ----------------------------------------------------------------------


class CourseRequest(BaseModel):
    """The body of PUT /courses/{course_id}."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"title": "Physics", "capacity": 3, "credits": 4}]},
    )
    title: str = Field(min_length=1, max_length=200, pattern=TEXT)
    capacity: WholeNumber = Field(
        ge=0, le=e.MAX_SEATS, description="Seats; below the seats taken it is refused"
    )
    credits: WholeNumber = Field(ge=0, le=MAX_COUNT, description="Credits the course costs")

    def command(self) -> e.SetCourse:
        return e.SetCourse(title=self.title, capacity=self.capacity, credits=self.credits)


class StudentRequest(BaseModel):
    """The body of PUT /students/{student_id}."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "Ada", "max_credits": 12}]}
    )
    name: str = Field(min_length=1, max_length=200, pattern=TEXT)
    max_credits: WholeNumber = Field(
        ge=0, le=MAX_COUNT, description="Credits the student may hold at once"
    )

    def command(self) -> e.SetStudent:
        return e.SetStudent(name=self.name, max_credits=self.max_credits)


class EnrollRequest(BaseModel):
    """The body of POST /enrollments."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"student_id": "s-1", "course_id": "k-1"}]}
    )
    student_id: str = StudentIdField
    course_id: str = CourseIdField
    waitlist: StrictBool = Field(
        True, description="When the course is full: join its waitlist (else be rejected)"
    )

    def command(self) -> e.Enroll:
        return e.Enroll(
            student_id=self.student_id, course_id=self.course_id, waitlist=self.waitlist
        )


class TransferRequest(BaseModel):
    """The body of POST /enrollments/{enrollment_id}/transfer."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"course_id": "k-2"}]}
    )
    course_id: str = CourseIdField

    def command(self) -> e.Transfer:
        return e.Transfer(course_id=self.course_id)


# --- 202 bodies --------------------------------------------------------------------------


class CourseAccepted(Accepted):
    course_id: str
    status: Literal["ACCEPTED"] = "ACCEPTED"


class StudentAccepted(Accepted):
    student_id: str
    status: Literal["ACCEPTED"] = "ACCEPTED"


class EnrollmentAccepted(Accepted):
    enrollment_id: str
    status: Literal["PENDING"] = "PENDING"


class DropAccepted(Accepted):
    enrollment_id: str
    status: Literal["DROP_REQUESTED"] = "DROP_REQUESTED"


class TransferAccepted(Accepted):
    enrollment_id: str
    course_id: str = Field(description="The course asked for")
    status: Literal["TRANSFER_REQUESTED"] = "TRANSFER_REQUESTED"


# --- read models as shown ----------------------------------------------------------------


class EnrollmentPublic(BaseModel):
    enrollment_id: str
    student_id: str
    course_id: str = Field(description="The enrollment's course now (the new one after a transfer)")
    status: str = Field(
        description="PENDING, WAITLISTED, ENROLLED, TRANSFERRING, REJECTED or DROPPED"
    )
    waitlist_position: int | None = Field(description="1 for the head of the waitlist")
    reason: str | None = Field(description="Why it was rejected, or why a transfer was refused")
    settled: bool = Field(
        description="No outcome pending (not PENDING or TRANSFERRING): what ?wait= waits for"
    )
    final: bool = Field(description="True once the status can no longer change")
    created_at: datetime
    updated_at: datetime
    last_sequence: int = Field(description="Sequence of the enrollment's last applied event")

    @classmethod
    def of(cls, row: EnrollmentRow) -> EnrollmentPublic:
        return cls(
            **row.model_dump(),
            settled=_ENROLLMENT_SAGA.is_settled(row.status),
            final=_ENROLLMENT_SAGA.is_final(row.status),
        )


class WaitlistPublic(BaseModel):
    enrollment_id: str
    student_id: str
    position: int = Field(description="1 for the head of the queue")


class RosterPublic(BaseModel):
    course_id: str
    title: str
    capacity: int
    credits: int
    enrolled: list[str] = Field(description="Student ids with a confirmed seat, in order")
    held: int = Field(description="Seats held for enrollments under way")
    waitlist: list[WaitlistPublic] = Field(description="The waitlist, in position order")
    updated_at: datetime
    last_sequence: int

    @classmethod
    def of(cls, row: RosterRow) -> RosterPublic:
        return cls(
            **row.model_dump(exclude={"enrolled", "waitlist"}),
            enrolled=list(row.enrolled),
            waitlist=[WaitlistPublic(**w.model_dump()) for w in row.waitlist],
        )


class CreditHoldPublic(BaseModel):
    enrollment_id: str
    course_id: str
    credits: int
    status: Literal["held", "enrolled"]


class StudentEnrollmentsPublic(BaseModel):
    student_id: str
    name: str
    max_credits: int
    credits_used: int = Field(description="Credits of confirmed enrollments")
    credits_held: int = Field(description="Credits held for enrollments under way")
    credits: list[CreditHoldPublic] = Field(
        description="What holds or uses the student's credits, as the student saw it last"
    )
    enrollments: list[EnrollmentPublic] = Field(
        description="The student's enrollments, every status, newest first"
    )
    updated_at: datetime

    @classmethod
    def of(cls, row: StudentRow, enrollments: list[EnrollmentRow]) -> StudentEnrollmentsPublic:
        return cls(
            **row.model_dump(exclude={"enrollments", "last_sequence"}),
            credits=[CreditHoldPublic(**c.model_dump()) for c in row.enrollments],
            enrollments=[EnrollmentPublic.of(r) for r in enrollments],
        )
