"""The enrollment read models: their folds over the events of a whole story, and their
declared columns (the native twin the Spark rebuild computes) giving the very same rows.

:func:`twin` reads a declaration the way ``sagas/projections/declare.py`` defines it, so a
column whose declared value disagrees with its fold fails here, without Spark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pytest

from sagas.catalog import COURSE, ENROLLMENT_SAGA, READ_MODELS, STUDENT, model_for
from sagas.contracts import enrollment as e
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.machinery.versions import FIRST
from sagas.messages import Envelope, Message
from sagas.participants.course import CourseSeats
from sagas.participants.student import StudentCredits
from sagas.projections.declare import (
    Constant,
    Difference,
    EntityId,
    Latest,
    LatestSequence,
    LatestTime,
    LatestVersion,
    OrElse,
    ReadModel,
    Value,
)
from sagas.projections.enrollments import ENROLLMENTS, EnrollmentRow
from sagas.projections.roster import COURSE_ROSTER, RosterRow
from sagas.projections.students import STUDENT_ENROLLMENTS, StudentRow
from tests.spark.golden import golden_events

from .helpers import Bus, at, envelope

pytestmark = pytest.mark.unit


def twin(model: ReadModel[Any], events: Iterable[Envelope]) -> dict[str, Any] | None:
    """The row the declaration says ``events`` (one entity's) make, or None (no row)."""
    known = [
        ev
        for ev in sorted(events, key=lambda ev: ev.sequence or 0)
        if ev.type in Message.known_types()
    ]
    starts = [i for i, ev in enumerate(known) if isinstance(ev.message(), model.starts)]
    if not starts:
        return None
    since = known[starts[-1] :]

    def latest(of: type[Message]) -> Envelope | None:
        return next((ev for ev in reversed(since) if isinstance(ev.message(), of)), None)

    def value(declared: Value) -> Any:
        match declared:
            case EntityId():
                return since[0].key.split(":", 1)[1]
            case Latest(of=of, field=field):
                found = latest(of)
                return None if found is None else getattr(found.message(), field)
            case LatestTime(of=of):
                found = latest(of)
                return None if found is None else found.occurred_at
            case LatestSequence(of=of):
                found = since[-1] if of is None else latest(of)
                return None if found is None else found.sequence
            case LatestVersion():
                return since[-1].definition_version or FIRST
            case Difference(left=left, right=right):
                return value(left) - value(right)
            case OrElse(first=first, then=then):
                found = value(first)
                return value(then) if found is None else found
            case Constant(value=constant):
                return constant
        raise AssertionError(f"no twin for {declared!r}")

    return {c.name: value(c.value) for c in model.columns}


def fold(model: ReadModel[Any], events: Iterable[Envelope]) -> Any:
    row = None
    for event in sorted(events, key=lambda ev: ev.sequence or 0):
        if event.type in Message.known_types():
            row = model.fold(row, event)
    return row


def streams(events: Iterable[Envelope]) -> dict[str, list[Envelope]]:
    by_key: dict[str, list[Envelope]] = defaultdict(list)
    for event in events:
        by_key[event.key].append(event)
    return by_key


def story() -> list[Envelope]:
    """Every domain event of a small enrollment story: a full course, its waitlist, a drop
    that promotes, a dropped waitlisted student, a refused and an accepted transfer."""
    bus = Bus.of(EnrollmentSaga(), CourseSeats(), StudentCredits())
    now = at(0)

    def send(channel: str, message: Message, key: str) -> None:
        nonlocal now
        now = now + (at(1) - at(0))
        bus.send(channel, envelope(message, key=key, occurred_at=now), now)

    send(COURSE, e.SetCourse(title="Algebra", capacity=2, credits=3), "alg")
    send(COURSE, e.SetCourse(title="Poetry", capacity=1, credits=2), "poe")
    for i in range(5):
        send(STUDENT, e.SetStudent(name=f"Student {i}", max_credits=6), f"s{i}")
    for i in range(5):
        send(ENROLLMENT_SAGA, e.Enroll(student_id=f"s{i}", course_id="alg"), f"e{i}")
    send(ENROLLMENT_SAGA, e.Drop(), "e3")  # waitlisted: leaves the queue
    send(ENROLLMENT_SAGA, e.Drop(), "e0")  # enrolled: e2 is promoted
    send(ENROLLMENT_SAGA, e.Transfer(course_id="poe"), "e1")  # accepted: alg frees a seat
    send(ENROLLMENT_SAGA, e.Transfer(course_id="poe"), "e2")  # refused: poetry is full
    return bus.published


def test_the_story_s_rows_show_what_happened():
    by_key = streams(story())

    def row(model: ReadModel[Any], key: str) -> Any:
        return fold(model, by_key[f"{model.entity_type}:{key}"])

    enrollments = {f"e{i}": row(ENROLLMENTS, f"e{i}") for i in range(5)}
    assert all(isinstance(r, EnrollmentRow) for r in enrollments.values())
    assert {k: (r.status, r.course_id, r.waitlist_position) for k, r in enrollments.items()} == {
        "e0": ("DROPPED", "alg", None),
        "e1": ("ENROLLED", "poe", None),
        "e2": ("ENROLLED", "alg", None),
        "e3": ("DROPPED", "alg", None),
        "e4": ("ENROLLED", "alg", None),
    }
    assert enrollments["e2"].reason == "transfer to poe refused: course full"
    assert enrollments["e0"].reason == "dropped by the student"
    assert enrollments["e1"].created_at < enrollments["e1"].updated_at

    algebra = row(COURSE_ROSTER, "alg")
    assert isinstance(algebra, RosterRow)
    assert (algebra.title, algebra.capacity, algebra.credits, algebra.held) == (
        "Algebra",
        2,
        3,
        0,
    )
    assert algebra.enrolled == ("s2", "s4")
    assert algebra.waitlist == ()
    poetry = row(COURSE_ROSTER, "poe")
    assert poetry.enrolled == ("s1",)

    s1 = row(STUDENT_ENROLLMENTS, "s1")
    assert isinstance(s1, StudentRow)
    assert (s1.name, s1.max_credits, s1.credits_used, s1.credits_held) == ("Student 1", 6, 2, 0)
    assert s1.enrollments == (
        e.StudentEnrollment(enrollment_id="e1", course_id="poe", credits=2, status="enrolled"),
    )
    assert row(STUDENT_ENROLLMENTS, "s0").credits_used == 0


def test_the_roster_shows_the_waitlist_in_position_order_while_it_lasts():
    events = story()
    algebra = [ev for ev in events if ev.key == "course:alg"]
    rows = [fold(COURSE_ROSTER, algebra[: n + 1]) for n in range(len(algebra))]
    queues = [tuple((w.enrollment_id, w.position) for w in r.waitlist) for r in rows]
    assert (("e2", 1), ("e3", 2), ("e4", 3)) in queues
    assert (("e2", 1), ("e4", 2)) in queues  # e3 left; e4 moved up
    assert (("e4", 1),) in queues  # e2 promoted


def test_an_event_before_its_enrollment_makes_no_row():
    by_key = streams(story())
    changes = [ev for ev in by_key["enrollment:e0"] if ev.type == e.EnrollmentStatusChanged.TYPE]
    assert fold(ENROLLMENTS, changes) is None


@pytest.mark.parametrize("model", READ_MODELS, ids=lambda m: m.name)
def test_the_declared_columns_give_the_rows_of_the_fold(model: ReadModel[Any]) -> None:
    golden = golden_events()
    # Golden events are keyed by their type's prefix (``ledger.Reserved`` -> ``ledger:g7``);
    # the ones that start this model's rows are also given to one of its entities.
    starting = [
        ev.model_copy(update={"key": f"{model.entity_type}:{ev.key}"})
        for ev in golden
        if isinstance(ev.message(), model.starts)
    ]
    events = [*story(), *golden, *starting]
    compared = 0
    for key, stream in streams(events).items():
        if model_for(key.split(":", 1)[0]) is not model:
            continue
        folded = fold(model, stream)
        assert twin(model, stream) == (None if folded is None else dict(folded)), key
        compared += folded is not None
    assert compared > 0, f"{model.name}: no stream made a row"
