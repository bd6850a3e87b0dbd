"""The legacy CDC pipeline for real: rows written with psycopg into the legacy PostgreSQL
database -> Debezium in Kafka Connect (deploy/local/connect.sh, the local worker on :8083)
-> Debezium's topics -> the worker process (ingest edge, correlator, legacy-domain,
enrollment domain) -> business events on the domain-event topic (read by an event tail)
-> the projector -> the read models (read through the API).

Ids are unique per run (the legacy database and Debezium's topics are shared by every run:
the worker reads the topics from their start, so earlier runs' actions are replayed into
this run's isolated topics too, and never match this run's ids).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
from sqlalchemy.engine import make_url

from sagas.contracts import legacy as lg
from sagas.messages import Envelope
from tests.integration.harness import Stack, isolated_settings, running_stack
from tests.integration.readside import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
CONNECT = ROOT / "deploy" / "local" / "connect.sh"
WINDOW_S = 4.0
ARRIVE_S = 60.0
"""How long a business event may take: Connect's poll, the ingest, the correlator's window."""
RUN = uuid.uuid4().hex[:6]
BUSINESS = (
    lg.StudentEnrolled.TYPE,
    lg.EnrollmentChanged.TYPE,
    lg.EnrollmentDropped.TYPE,
    lg.StudentUpdated.TYPE,
    lg.CourseUpdated.TYPE,
)


def connect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONNECT), *args], cwd=ROOT, capture_output=True, text=True, timeout=240
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    # `make test` started Connect already; start is idempotent (registers, waits for RUNNING).
    started = await asyncio.to_thread(connect, "start")
    assert started.returncode == 0, started.stderr[-3000:]
    tmp = tmp_path_factory.mktemp("cdc")
    with fresh_database("postgresql", tmp) as url:
        settings = isolated_settings(
            tmp,
            database_url=url,
            cdc_enabled=True,
            cdc_drives_enrollment=True,
            cdc_window_s=WINDOW_S,
        )
        async with running_stack(settings, tmp, projected=True) as stack:
            yield stack


@contextmanager
def legacy(stack: Stack) -> Iterator[psycopg.Connection[Any]]:
    url = make_url(stack.settings.legacy_database_url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
        yield conn


def write(stack: Stack, *transactions: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Each list of (sql, params) in a transaction of its own, one after the other."""
    with legacy(stack) as conn:
        for statements in transactions:
            with conn.transaction(), conn.cursor() as cur:
                for sql, params in statements:
                    cur.execute(sql, params)


def student(sid: str, email: str = "x@school.test", max_credits: int = 20) -> Any:
    return ("INSERT INTO school.student VALUES (%s, %s, %s, %s)", (sid, sid, email, max_credits))


def course(cid: str, capacity: int = 30, credits: int = 5) -> Any:
    return (
        "INSERT INTO school.course VALUES (%s, %s, %s, %s, %s)",
        (cid, cid, "T", capacity, credits),
    )


def link(sid: str, cid: str) -> Any:
    return ("INSERT INTO school.student_course VALUES (%s, %s)", (sid, cid))


def ids(name: str) -> tuple[str, str]:
    return f"s-{RUN}-{name}", f"c-{RUN}-{name}"


def about(*entity_ids: str) -> Callable[[Envelope], bool]:
    """Business events naming any of these students or courses."""

    def match(env: Envelope) -> bool:
        p = env.payload
        named = {p.get("student_id"), p.get("course_id"), p.get("from_course_id")}
        return env.type in BUSINESS and bool(named & set(entity_ids))

    return match


async def settled_events(stack: Stack, wanted: Callable[[Envelope], bool], n: int) -> list[Any]:
    """The business events ``wanted`` picks, once ``n`` arrived and nothing more came for
    two windows after (a duplicate would come by then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ARRIVE_S
    while len(found := [e for e in stack.tail.events if wanted(e)]) < n:
        assert loop.time() < deadline, f"{len(found)} of {n} event(s) after {ARRIVE_S} s: {found}"
        await asyncio.sleep(0.2)
    await asyncio.sleep(2 * WINDOW_S)
    return [e.message() for e in stack.tail.events if wanted(e)]


async def test_one_transaction_of_student_course_and_link_is_one_student_enrolled(
    stack: Stack,
) -> None:
    s, c = ids("one-tx")
    await asyncio.to_thread(write, stack, [student(s), course(c), link(s, c)])
    events = await settled_events(stack, about(s, c), 1)
    assert len(events) == 1, events
    (enrolled,) = events
    assert isinstance(enrolled, lg.StudentEnrolled)
    assert (enrolled.student_id, enrolled.course_id) == (s, c)
    assert enrolled.student_created and enrolled.course_created
    assert enrolled.course is not None and enrolled.course.capacity == 30


async def test_the_three_rows_in_three_transactions_within_the_window_are_one_event(
    stack: Stack,
) -> None:
    """Needs stage 2 of the correlator (merging an action spread over transactions): with
    stage 1 alone this yields a StudentUpdated, a CourseUpdated and a StudentEnrolled."""
    s, c = ids("three-tx")
    await asyncio.to_thread(write, stack, [student(s)], [course(c)], [link(s, c)])
    events = await settled_events(stack, about(s, c), 1)
    assert [type(e) for e in events] == [lg.StudentEnrolled], events
    (enrolled,) = events
    assert enrolled.student is not None and enrolled.course is not None
    assert enrolled.student_created and enrolled.course_created
    assert len(enrolled.tx_ids) == 3


async def test_a_link_whose_course_changes_is_one_enrollment_changed(stack: Stack) -> None:
    s, c = ids("moved")
    c2 = f"{c}-2"
    await asyncio.to_thread(write, stack, [student(s), course(c), course(c2), link(s, c)])
    await settled_events(stack, about(s), 1)
    before = len([e for e in stack.tail.events if about(s)(e)])
    await asyncio.to_thread(
        write,
        stack,
        [("UPDATE school.student_course SET course_id = %s WHERE student_id = %s", (c2, s))],
    )
    events = (await settled_events(stack, about(s), before + 1))[before:]
    assert len(events) == 1, events
    (changed,) = events
    assert isinstance(changed, lg.EnrollmentChanged)
    assert (changed.student_id, changed.from_course_id, changed.course_id) == (s, c, c2)


async def test_an_email_update_is_one_student_updated(stack: Stack) -> None:
    s, _ = ids("email")
    await asyncio.to_thread(write, stack, [student(s)])
    await settled_events(stack, about(s), 1)
    await asyncio.to_thread(
        write,
        stack,
        [("UPDATE school.student SET email = %s WHERE id = %s", ("new@school.test", s))],
    )
    events = await settled_events(stack, about(s), 2)
    assert len(events) == 2, events
    updated = events[1]
    assert isinstance(updated, lg.StudentUpdated)
    assert (updated.changed, updated.created) == (("email",), False)
    assert updated.student.email == "new@school.test"


async def test_a_link_delete_is_one_enrollment_dropped(stack: Stack) -> None:
    s, c = ids("drop")
    await asyncio.to_thread(write, stack, [student(s), course(c), link(s, c)])
    await settled_events(stack, about(s), 1)
    await asyncio.to_thread(
        write, stack, [("DELETE FROM school.student_course WHERE student_id = %s", (s,))]
    )
    events = await settled_events(stack, about(s), 2)
    assert len(events) == 2, events
    assert events[1] == lg.EnrollmentDropped(student_id=s, course_id=c, tx_ids=events[1].tx_ids)


async def test_a_legacy_enrollment_appears_in_the_course_roster(stack: Stack) -> None:
    """SAGALINE_CDC_DRIVES_ENROLLMENT: the course is upserted from its row (capacity 2),
    the student from theirs, and an enrollment saga seats the student; a legacy drop frees
    the seat again."""
    s, c = ids("roster")
    await asyncio.to_thread(
        write, stack, [student(s, max_credits=12), course(c, capacity=2, credits=4), link(s, c)]
    )
    roster = await stack.eventually(
        f"/courses/{c}/roster", lambda b: b.get("enrolled") == [s], timeout=ARRIVE_S
    )
    assert (roster["enrolled"], roster["capacity"], roster["credits"]) == ([s], 2, 4)
    mine = await stack.eventually(
        f"/students/{s}/enrollments", lambda b: b.get("credits_used") == 4, timeout=30
    )
    assert (mine["max_credits"], mine["credits_used"]) == (12, 4)
    await asyncio.to_thread(
        write, stack, [("DELETE FROM school.student_course WHERE student_id = %s", (s,))]
    )
    roster = await stack.eventually(
        f"/courses/{c}/roster", lambda b: b.get("enrolled") == [], timeout=ARRIVE_S
    )
    assert roster["enrolled"] == []


async def test_connect_killed_and_restarted_mid_stream_yields_no_duplicate_event(
    stack: Stack,
) -> None:
    """SIGKILL the Connect worker's JVM while enrollments are being written: Debezium
    resumes from its last flushed offset and sends some changes again; the correlator drops
    the copies (their positions), so every legacy action is still one business event."""
    actions = [ids(f"kill-{i}") for i in range(12)]
    pid_file = ROOT / ".local" / "connect" / "connect.pid"

    def write_some(part: list[tuple[str, str]]) -> None:
        for s, c in part:
            write(stack, [student(s), course(c), link(s, c)])

    await asyncio.to_thread(write_some, actions[:6])
    await asyncio.sleep(0.5)  # some of them read by Debezium, their offsets not all flushed
    os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
    await asyncio.to_thread(write_some, actions[6:9])  # written while Connect is down
    restarted = await asyncio.to_thread(connect, "start")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    await asyncio.to_thread(write_some, actions[9:])
    everyone = {x for pair in actions for x in pair}
    events = await settled_events(stack, about(*everyone), len(actions))
    assert sorted((e.student_id, e.course_id) for e in events) == sorted(actions), events
    assert all(isinstance(e, lg.StudentEnrolled) for e in events)


async def test_the_worker_refuses_debeziums_topics_missing_or_partitioned_otherwise(
    tmp_path: Path,
) -> None:
    """The ingest keeps its positions in a table partitioned like Debezium's topics: with
    CDC on, ``check_topics`` (run before the worker starts) names a missing one as
    Debezium's and a partition count other than SAGALINE_CDC_TOPIC_PARTITIONS."""
    from runtime.topics import TopicMismatch, check_topics, create_topics

    missing = isolated_settings(tmp_path, cdc_enabled=True, cdc_topic_prefix=f"nope{RUN}")
    await create_topics(missing)  # Sagaline's own topics: never Debezium's
    with pytest.raises(TopicMismatch, match="Debezium's, created by Kafka Connect"):
        await check_topics(missing, wait_s=0)
    assert f"nope{RUN}.transaction" in str(await _mismatch(missing))
    other = isolated_settings(tmp_path, cdc_enabled=True, cdc_topic_partitions=2)
    await create_topics(other)
    assert "legacy.school.student: 1 partitions, declared 2" in str(await _mismatch(other))


async def _mismatch(settings: Any) -> Exception:
    from runtime.topics import TopicMismatch, check_topics

    try:
        await check_topics(settings, wait_s=0)
    except TopicMismatch as exc:
        return exc
    raise AssertionError("check_topics passed")


async def test_the_worker_killed_mid_stream_loses_no_action_and_publishes_each_once(
    stack: Stack,
) -> None:
    """SIGKILL the Sagaline worker while legacy actions stream in: the ingest edge stored
    its Debezium positions only after the correlator's commands were acknowledged, so the
    restarted worker re-reads what it had not stored (never skips), and everything decided
    again carries the same ids: each action is one business event (a batch replayed after
    the crash may publish an identical copy, same message id and sequence, which every
    consumer drops)."""
    actions = [ids(f"worker-kill-{i}") for i in range(10)]

    def write_some(part: list[tuple[str, str]]) -> None:
        for s, c in part:
            write(stack, [student(s), course(c), link(s, c)])

    await asyncio.to_thread(write_some, actions[:5])
    await asyncio.sleep(1.0)
    await asyncio.to_thread(stack.worker.kill)
    await asyncio.to_thread(write_some, actions[5:])
    await asyncio.to_thread(stack.worker.start)
    everyone = {x for pair in actions for x in pair}
    wanted = about(*everyone)
    await settled_events(stack, wanted, len(actions))
    by_id: dict[str, Envelope] = {}
    for env in stack.tail.events:
        if wanted(env):
            assert by_id.setdefault(env.message_id, env) == env, "a copy that differs"
    got = sorted((e.payload["student_id"], e.payload["course_id"]) for e in by_id.values())
    assert got == sorted(actions)
    assert all(e.type == lg.StudentEnrolled.TYPE for e in by_id.values())


BULK = 5_000
BULK_ARRIVE_S = 240.0
PROMPT_S = 15.0
"""An enrollment written after the bulk transaction is published within this (it takes
1-3 s on an idle stack: Connect's poll, the ingest, both stages)."""


async def test_a_5000_row_transaction_yields_its_events_and_no_stall(stack: Stack) -> None:
    """A bulk ``UPDATE school.student`` of 5,000 rows in one transaction (after a bulk
    INSERT of them, one transaction too): held whole, its correlator state (~1.7 MB) was
    over the changelog's 1 MB, the batch's store failed on every retry and the partition
    stopped. The correlator sends its rows in chunks as they arrive: every student's event
    comes out once, and an ordinary enrollment written after it is published promptly."""
    prefix = f"s-{RUN}-bulk-"

    def ours(env: Envelope) -> bool:
        return env.type in BUSINESS and str(env.payload.get("student_id", "")).startswith(prefix)

    bulk_insert = (
        "INSERT INTO school.student SELECT %s || lpad(g::text, 5, '0'), 'Bulk', "
        "'old@school.test', 20 FROM generate_series(1, %s) AS g",
        (prefix, BULK),
    )
    before = _stalls(await _worker_counts(stack))
    await asyncio.to_thread(write, stack, [bulk_insert])
    created = await _all_arrived(stack, ours, BULK)
    bulk_update = (
        "UPDATE school.student SET email = 'new@school.test' WHERE id LIKE %s",
        (f"{prefix}%",),
    )
    await asyncio.to_thread(write, stack, [bulk_update])
    events = (await _all_arrived(stack, ours, 2 * BULK))[len(created) :]
    students = {f"{prefix}{i:05d}" for i in range(1, BULK + 1)}
    assert all(isinstance(e, lg.StudentUpdated) and e.created for e in created)
    assert {e.student_id for e in created} == students
    assert all(isinstance(e, lg.StudentUpdated) and e.changed == ("email",) for e in events)
    assert sorted(e.student_id for e in events) == sorted(students)  # each once
    assert _stalls(await _worker_counts(stack)) == before  # no batch failed, none refused

    s, c = ids_after = ids("after-bulk")
    loop = asyncio.get_running_loop()
    written = loop.time()
    await asyncio.to_thread(write, stack, [student(s), course(c), link(s, c)])
    while not any(about(*ids_after)(e) for e in stack.tail.events):
        assert loop.time() - written < PROMPT_S, "the enrollment after the bulk is late"
        await asyncio.sleep(0.1)
    (enrolled,) = await settled_events(stack, about(*ids_after), 1)
    assert isinstance(enrolled, lg.StudentEnrolled) and enrolled.student_id == s


async def _worker_counts(stack: Stack) -> dict[str, float]:
    url = f"http://127.0.0.1:{stack.settings.worker_web_port}/sagaline/metrics"
    async with httpx.AsyncClient() as http:
        response = await http.get(url, timeout=10)
    response.raise_for_status()
    counts: dict[str, float] = response.json()
    return counts


def _stalls(counts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in counts.items() if k.endswith((".batch_retries", "too_large"))}


async def _all_arrived(stack: Stack, wanted: Callable[[Envelope], bool], n: int) -> list[Any]:
    """The first ``n`` events ``wanted`` picks, once they arrived, and no more two windows
    later (a duplicate would have come by then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BULK_ARRIVE_S
    while len(found := [e for e in stack.tail.events if wanted(e)]) < n:
        assert loop.time() < deadline, f"{len(found)} of {n} event(s) after {BULK_ARRIVE_S} s"
        await asyncio.sleep(0.5)
    await asyncio.sleep(2 * WINDOW_S)
    found = [e.message() for e in stack.tail.events if wanted(e)]
    assert len(found) == n, f"{len(found)} events, {n} expected"
    return found
