"""Course enrollment end to end on the real broker: REST command -> Kafka -> the enrollment
saga, the course and the student (one worker process) -> domain events -> projector ->
PostgreSQL -> the GET routes. Results are read through the REST API, orders of arrival
from the course's own topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sagas.catalog import COURSE
from sagas.contracts import enrollment as e
from sagas.messages import Envelope
from tests.integration.harness import Stack, isolated_settings, read_all, running_stack
from tests.integration.readside import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("enrollment")
    with fresh_database("postgresql", tmp) as url:
        settings = isolated_settings(tmp, database_url=url)
        async with running_stack(settings, tmp, projected=True) as stack:
            yield stack


async def _course(stack: Stack, course: str, capacity: int, credits: int = 3) -> None:
    token = await stack.set_course(course, capacity, credits)
    roster = await stack.read(f"/courses/{course}/roster", token)
    assert roster["capacity"] == capacity


async def _students(stack: Stack, *students: str, max_credits: int = 30) -> None:
    tokens = await asyncio.gather(*(stack.set_student(s, max_credits) for s in students))
    for student, token in zip(students, tokens, strict=True):
        body = await stack.read(f"/students/{student}/enrollments", token)
        assert body["max_credits"] == max_credits


async def _enrolled(stack: Stack, student: str, course: str, **kw: Any) -> str:
    enrollment, token = await stack.enroll(student, course, **kw)
    body = await stack.enrollment(enrollment, token)
    assert (body["status"], body["course_id"]) == ("ENROLLED", course), body
    return enrollment


async def _seats_taken_in_arrival_order(stack: Stack, course: str) -> list[str]:
    """The enrollment ids whose seat requests the course received, in the order it did
    (its topic's partition order), each once."""
    records = await read_all(stack.settings, COURSE)
    mine = sorted(
        (r for r in records if r.key == course.encode()), key=lambda r: (r.partition, r.offset)
    )
    order: list[str] = []
    for record in mine:
        envelope = Envelope.decode(record.value)
        if envelope.type == e.ReserveSeat.TYPE:
            enrollment = envelope.payload["enrollment_id"]
            if enrollment not in order:
                order.append(enrollment)
    return order


async def test_an_enrollment_takes_a_seat_and_the_students_credits(stack: Stack) -> None:
    await _course(stack, "intro", capacity=2, credits=4)
    await _students(stack, "ada", max_credits=10)
    enrollment = await _enrolled(stack, "ada", "intro")
    body = await stack.enrollment(enrollment)
    assert (body["student_id"], body["waitlist_position"], body["reason"]) == ("ada", None, None)
    assert (body["settled"], body["final"]) == (True, False)
    roster = await stack.eventually("/courses/intro/roster", lambda b: b["enrolled"] == ["ada"])
    assert (roster["enrolled"], roster["held"], roster["waitlist"]) == (["ada"], 0, [])
    student = await stack.eventually("/students/ada/enrollments", lambda b: b["credits_used"] == 4)
    assert (student["credits_used"], student["credits_held"]) == (4, 0)
    assert [x["enrollment_id"] for x in student["enrollments"]] == [enrollment]
    timeline = await stack.read(f"/sagas/{enrollment}")
    assert (timeline["saga_type"], timeline["status"], timeline["final"]) == (
        "enrollment",
        "ENROLLED",
        False,
    )
    assert timeline["steps"][0]["event_type"] == e.EnrollmentRequested.TYPE


async def test_the_same_idempotency_key_names_one_enrollment(stack: Stack) -> None:
    await _course(stack, "idem", capacity=5)
    await _students(stack, "ida")
    first, _ = await stack.enroll("ida", "idem", key="k-1")
    second, _ = await stack.enroll("ida", "idem", key="k-1")
    assert first == second
    await stack.enrollment(first)
    roster = await stack.eventually("/courses/idem/roster", lambda b: b["enrolled"] == ["ida"])
    assert roster["enrolled"] == ["ida"]


async def test_a_drop_promotes_the_first_in_line(stack: Stack) -> None:
    await _course(stack, "full", capacity=1)
    await _students(stack, "amy", "bob", "cat")
    amy = await _enrolled(stack, "amy", "full")
    waiting = {}
    for student in ("bob", "cat"):  # one after the other: the queue's order is known
        enrollment, token = await stack.enroll(student, "full")
        waiting[student] = await stack.enrollment(enrollment, token)
    assert [(w["status"], w["waitlist_position"]) for w in waiting.values()] == [
        ("WAITLISTED", 1),
        ("WAITLISTED", 2),
    ]
    dropped = await stack.enrollment(amy, await stack.drop(amy))
    assert (dropped["status"], dropped["final"]) == ("DROPPED", True)
    bob_id, cat_id = (w["enrollment_id"] for w in waiting.values())
    bob = await stack.eventually(f"/enrollments/{bob_id}", lambda b: b["status"] == "ENROLLED")
    assert (bob["status"], bob["waitlist_position"]) == ("ENROLLED", None)
    cat = await stack.eventually(f"/enrollments/{cat_id}", lambda b: b["waitlist_position"] == 1)
    assert (cat["status"], cat["waitlist_position"]) == ("WAITLISTED", 1)
    roster = await stack.eventually("/courses/full/roster", lambda b: b["enrolled"] == ["bob"])
    assert roster["enrolled"] == ["bob"] and roster["held"] == 0
    assert roster["waitlist"] == [{"enrollment_id": cat_id, "student_id": "cat", "position": 1}]
    # A drop the enrollment cannot take changes nothing; its timeline says why.
    again = await stack.drop(amy)
    assert (await stack.enrollment(amy, again))["status"] == "DROPPED"
    timeline = await stack.read(f"/sagas/{amy}")
    assert timeline["steps"][-1]["event_type"] == e.CommandRefused.TYPE


async def test_a_full_course_without_waitlist_rejects(stack: Stack) -> None:
    await _course(stack, "tiny", capacity=1)
    await _students(stack, "dan", "eve")
    await _enrolled(stack, "dan", "tiny")
    enrollment, token = await stack.enroll("eve", "tiny", waitlist=False)
    body = await stack.enrollment(enrollment, token)
    assert (body["status"], body["final"]) == ("REJECTED", True)
    assert "course full" in body["reason"]
    roster = await stack.read("/courses/tiny/roster")
    assert roster["waitlist"] == []


async def test_a_student_over_max_credits_is_rejected_and_the_seat_released(
    stack: Stack,
) -> None:
    await _course(stack, "heavy", capacity=1, credits=5)
    await _students(stack, "fay", max_credits=4)
    await _students(stack, "gus", max_credits=5)
    enrollment, token = await stack.enroll("fay", "heavy")
    body = await stack.enrollment(enrollment, token)
    assert body["status"] == "REJECTED" and "credit" in body["reason"], body
    roster = await stack.eventually("/courses/heavy/roster", lambda b: b["held"] == 0)
    assert (roster["held"], roster["enrolled"]) == (0, [])
    await _enrolled(stack, "gus", "heavy")  # the seat was given back
    fay = await stack.read("/students/fay/enrollments")
    assert (fay["credits_used"], fay["credits_held"]) == (0, 0)


async def test_a_transfer_moves_the_seat_and_the_credits(stack: Stack) -> None:
    await _course(stack, "from", capacity=1, credits=2)
    await _course(stack, "to", capacity=1, credits=3)
    await _students(stack, "hal", max_credits=3)
    enrollment = await _enrolled(stack, "hal", "from")
    moved = await stack.enrollment(enrollment, await stack.transfer(enrollment, "to"))
    assert (moved["status"], moved["course_id"], moved["reason"]) == ("ENROLLED", "to", None)
    old = await stack.eventually("/courses/from/roster", lambda b: b["enrolled"] == [])
    new = await stack.read("/courses/to/roster")
    assert (old["enrolled"], new["enrolled"], new["held"]) == ([], ["hal"], 0)
    hal = await stack.eventually("/students/hal/enrollments", lambda b: b["credits_used"] == 3)
    assert (hal["credits_used"], hal["credits_held"]) == (3, 0)
    assert [c["course_id"] for c in hal["credits"]] == ["to"]


async def test_a_refused_transfer_keeps_the_old_seat(stack: Stack) -> None:
    await _course(stack, "stay", capacity=1)
    await _course(stack, "packed", capacity=1)
    await _students(stack, "ian", "jo")
    await _enrolled(stack, "jo", "packed")
    enrollment = await _enrolled(stack, "ian", "stay")
    kept = await stack.enrollment(enrollment, await stack.transfer(enrollment, "packed"))
    assert (kept["status"], kept["course_id"]) == ("ENROLLED", "stay")
    assert "course full" in kept["reason"], kept
    stay = await stack.read("/courses/stay/roster")
    packed = await stack.eventually("/courses/packed/roster", lambda b: b["held"] == 0)
    assert (stay["enrolled"], packed["enrolled"], packed["waitlist"]) == (["ian"], ["jo"], [])
    # A transfer a waitlisted enrollment cannot take: refused, nothing changes.
    await _students(stack, "kim")
    waiting, token = await stack.enroll("kim", "packed")
    assert (await stack.enrollment(waiting, token))["status"] == "WAITLISTED"
    still = await stack.enrollment(waiting, await stack.transfer(waiting, "stay"))
    assert (still["status"], still["waitlist_position"]) == ("WAITLISTED", 1)
    timeline = await stack.read(f"/sagas/{waiting}")
    assert timeline["steps"][-1]["event_type"] == e.CommandRefused.TYPE


async def test_100_students_race_for_30_seats_and_drops_promote_in_order(stack: Stack) -> None:
    await _course(stack, "popular", capacity=30, credits=1)
    students = [f"racer-{i:03d}" for i in range(100)]
    await _students(stack, *students, max_credits=1)
    sent = await asyncio.gather(*(stack.enroll(s, "popular") for s in students))
    settled = await asyncio.gather(*(stack.enrollment(i, t) for i, t in sent))
    by_id = {body["enrollment_id"]: body for body in settled}
    arrival = await _seats_taken_in_arrival_order(stack, "popular")
    assert sorted(arrival) == sorted(by_id)
    seated, queued = arrival[:30], arrival[30:]
    assert [by_id[i]["status"] for i in seated] == ["ENROLLED"] * 30
    assert [(by_id[i]["status"], by_id[i]["waitlist_position"]) for i in queued] == [
        ("WAITLISTED", n) for n in range(1, 71)
    ]
    roster = await stack.eventually("/courses/popular/roster", lambda b: len(b["enrolled"]) == 30)
    assert [w["enrollment_id"] for w in roster["waitlist"]] == queued
    assert [w["position"] for w in roster["waitlist"]] == list(range(1, 71))

    drops = await asyncio.gather(*(stack.drop(i) for i in seated[:5]))
    for enrollment, token in zip(seated[:5], drops, strict=True):
        assert (await stack.enrollment(enrollment, token))["status"] == "DROPPED"
    promoted, behind = queued[:5], queued[5:]
    roster = await stack.eventually(
        "/courses/popular/roster", lambda b: len(b["waitlist"]) == 65 and b["held"] == 0
    )
    assert [w["enrollment_id"] for w in roster["waitlist"]] == behind
    assert [w["position"] for w in roster["waitlist"]] == list(range(1, 66))
    assert len(roster["enrolled"]) == 30
    for enrollment in promoted:
        body = await stack.eventually(
            f"/enrollments/{enrollment}", lambda b: b["status"] == "ENROLLED"
        )
        assert body["status"] == "ENROLLED", body
    positions = [
        (await stack.eventually(f"/enrollments/{i}", lambda b, n=n: b["waitlist_position"] == n))[
            "waitlist_position"
        ]
        for n, i in enumerate(behind, start=1)
    ]
    assert positions == list(range(1, 66))


async def test_two_transfers_into_the_last_seat_move_one_and_keep_the_other(
    stack: Stack,
) -> None:
    await _course(stack, "last-seat", capacity=1)
    await _course(stack, "left-a", capacity=1)
    await _course(stack, "left-b", capacity=1)
    await _students(stack, "lea", "max")
    lea = await _enrolled(stack, "lea", "left-a")
    max_ = await _enrolled(stack, "max", "left-b")
    tokens = await asyncio.gather(
        stack.transfer(lea, "last-seat"), stack.transfer(max_, "last-seat")
    )
    after = [await stack.enrollment(i, t) for i, t in zip((lea, max_), tokens, strict=True)]
    moved = [b for b in after if b["course_id"] == "last-seat"]
    kept = [b for b in after if b["course_id"] != "last-seat"]
    assert len(moved) == 1 and len(kept) == 1, after
    assert moved[0]["status"] == kept[0]["status"] == "ENROLLED"
    assert "course full" in kept[0]["reason"]
    mover = moved[0]["student_id"]
    stayer, old = kept[0]["student_id"], kept[0]["course_id"]
    roster = await stack.read("/courses/last-seat/roster")
    assert (roster["enrolled"], roster["held"]) == ([mover], 0)
    assert (await stack.read(f"/courses/{old}/roster"))["enrolled"] == [stayer]
    left = "left-a" if old == "left-b" else "left-b"
    emptied = await stack.eventually(f"/courses/{left}/roster", lambda b: b["enrolled"] == [])
    assert emptied["enrolled"] == []
