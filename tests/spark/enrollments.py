"""An enrollment history for the rebuild's tests, played by the real pure definitions.

:func:`enrollment_history` drives the enrollment saga, the course and the student
participants through the unit tests' in-memory bus (:class:`tests.unit.helpers.Bus`: every
message through its wire format, delivered in order per channel as Kafka would per key) and
returns the domain events they publish, exactly as the worker would publish them. Clients
set courses (small, so they fill up) and students (some with few credits), enroll with and
without the waitlist, drop (enrolled and waitlisted ones, which promotes and moves the
queue), transfer (accepted, refused for a full course or for credits), send a command twice
(deduplicated), drop before their enrollment arrives, change capacities (some refused) and
sometimes a student's replies stall until the saga times out. Times spread over ``days``.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.contracts import enrollment as e
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.ids import external_command_id
from sagas.messages import Envelope, Message
from sagas.participants.course import CourseSeats
from sagas.participants.student import StudentCredits
from tests.spark import history
from tests.unit.helpers import Bus

T0 = datetime.fromisoformat("2024-03-01T08:00:00+00:00")
ACTIONS = (
    ("enroll", 50),
    ("drop", 12),
    ("transfer", 12),
    ("duplicate", 4),
    ("drop_first", 2),
    ("set_course", 4),
    ("set_student", 3),
    ("stall", 3),
)


class Clients:
    """What clients send, with ``cmd-`` ids (so receipts are recorded) and a clock."""

    def __init__(self, rng: random.Random, step_s: float) -> None:
        self.bus = Bus.of(EnrollmentSaga(), CourseSeats(), StudentCredits())
        self.rng = rng
        self.now = T0
        self.step_s = step_s
        self.sent = 0
        self.last: tuple[str, Envelope] | None = None

    def send(self, channel: str, key: str, message: Message) -> None:
        self.sent += 1
        self.now += timedelta(seconds=self.rng.uniform(0.2, 2) * self.step_s)
        env = Envelope.wrap(
            message,
            message_id=external_command_id(key, f"{channel}/{self.sent}"),
            key=key,
            occurred_at=self.now,
        )
        self.last = (channel, env)
        self.bus.send(channel, env, self.now)

    def again(self) -> None:
        """The last command delivered twice (a client retry, a redelivery)."""
        if self.last is not None:
            self.bus.send(*self.last, self.now)

    def status(self, enrollment: str) -> str | None:
        record = self.bus.records.get((ENROLLMENT_SAGA, enrollment))
        return None if record is None else record.state.status


def enrollment_history(
    enrollments: int, courses: int = 6, students: int = 30, seed: int = 13, days: int = 2
) -> list[Envelope]:
    """The events of about ``enrollments`` client actions, in the order they were published."""
    rng = random.Random(seed)
    c = Clients(rng, step_s=timedelta(days=days).total_seconds() / max(enrollments, 1) / 1.1)
    course_ids = [f"course-{i}" for i in range(courses)]
    student_ids = [f"s{i:03d}" for i in range(students)]
    for course in course_ids:
        set_course(c, course)
    for student in student_ids:
        c.send(STUDENT, student, e.SetStudent(name=f"Student {student}", max_credits=_credits(rng)))
    made: list[str] = []
    kinds = [k for k, w in ACTIONS for _ in range(w)]
    for i in range(enrollments):
        kind = rng.choice(kinds)
        if kind == "enroll" or not made:
            made.append(f"enr-{i:05d}")
            enroll(c, made[-1], rng.choice(student_ids), rng.choice(course_ids))
        elif kind == "drop":
            c.send(ENROLLMENT_SAGA, rng.choice(made), e.Drop())
        elif kind == "transfer":
            enrolled = [m for m in made if c.status(m) == "ENROLLED"] or made
            c.send(
                ENROLLMENT_SAGA, rng.choice(enrolled), e.Transfer(course_id=rng.choice(course_ids))
            )
        elif kind == "duplicate":
            c.again()
        elif kind == "drop_first":  # the drop overtakes its enrollment: it ends DROPPED
            made.append(f"enr-{i:05d}")
            c.send(ENROLLMENT_SAGA, made[-1], e.Drop(reason="changed my mind"))
            enroll(c, made[-1], rng.choice(student_ids), rng.choice(course_ids))
        elif kind == "set_course":
            set_course(c, rng.choice(course_ids))
        elif kind == "set_student":
            student = rng.choice(student_ids)
            c.send(
                STUDENT, student, e.SetStudent(name=f"Student {student}", max_credits=_credits(rng))
            )
        else:  # the student's replies stall past the saga's step timeout
            made.append(f"enr-{i:05d}")
            c.bus.paused.add(EnrollmentSaga().students)
            enroll(c, made[-1], rng.choice(student_ids), rng.choice(course_ids))
            c.now += EnrollmentSaga().step_timeout + timedelta(seconds=1)
            c.bus.tick(c.now)
            c.bus.resume(EnrollmentSaga().students, c.now)
    return list(c.bus.published)


def enroll(c: Clients, enrollment: str, student: str, course: str) -> None:
    waitlist = c.rng.random() < 0.85
    c.send(
        ENROLLMENT_SAGA,
        enrollment,
        e.Enroll(student_id=student, course_id=course, waitlist=waitlist),
    )


def set_course(c: Clients, course: str) -> None:
    """A course with a few seats (capacity changes below the seats taken are refused)."""
    capacity = c.rng.choice((0, 1, 2, 3, 3, 4, 5))
    title = f"Course {course}" if c.rng.random() < 0.9 else f"Cours d'été {course} ✓"
    c.send(COURSE, course, e.SetCourse(title=title, capacity=capacity, credits=c.rng.randint(0, 6)))


def _credits(rng: random.Random) -> int:
    return rng.choice((0, 3, 6, 9, 12, 20, 30))


def messy_enrollments(enrollments: int, seed: int = 13, days: int = 2) -> list[Envelope]:
    """:func:`enrollment_history` made messy like the order log: a few enrollments with a gap
    that never fills, copies, and enrollments', courses' and students' events written out
    of order and late."""
    events = history.with_gaps(
        enrollment_history(enrollments, seed=seed, days=days), seed=seed, prefix="enrollment:"
    )
    return history.messy(events, seed=seed + 1, entities=("enrollment:", "course:", "student:"))


def lax_course(course: str = "c-lax") -> list[history.Raw]:
    """A course fact and a student fact written loosely (escapes, spaces, another key order),
    their lists holding text a JSON writer must escape (not ASCII, beyond the BMP, DEL, a
    control character, quotes): valid for pydantic, so the projector applies them; the
    rebuild takes the exact route for them and must write the same JSON columns."""
    odd = ("é😀\x7f", "tab\there\u0001", 'quote"back\\slash', "plain")
    base = {"saga_id": None, "occurred_at": "2024-03-01T09:00:00.5+00:00", "sequence": 1}
    course_fact = {
        **base,
        "message_id": f"lax-{course}",
        "key": f"course:{course}",
        "entity_type": "course",
        "type": e.CourseSet.TYPE,
        "payload": {
            "waitlist": [{"position": 1, "student_id": "s-9", "enrollment_id": "e-9"}],
            "enrolled": list(odd),
            "title": "Café ✓",
            "capacity": 4,
            "credits": 3,
            "held": 0,
        },
    }
    student_fact = {
        **base,
        "message_id": f"lax-{course}-student",
        "key": "student:s-lax",
        "entity_type": "student",
        "type": e.StudentSet.TYPE,
        "payload": {
            "name": "Zoë 😀",
            "max_credits": 9,
            "credits_used": 3,
            "credits_held": 0,
            "enrollments": [
                {"status": "enrolled", "credits": 3, "course_id": course, "enrollment_id": "e-9"}
            ],
        },
    }
    return [
        (f"course:{course}".encode(), json.dumps(course_fact, indent=1).encode()),
        (b"student:s-lax", json.dumps(student_fact).encode()),
    ]
