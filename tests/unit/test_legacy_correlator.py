"""The legacy CDC correlator, both stages, over the real Debezium records in
tests/fixtures/debezium/ (both converter shapes), driven through the in-memory bus so the
parts, claims and answers between the stages really flow (every envelope and state through
its wire format): every arrival order of the three rows of an enrollment, in one
transaction or three, with and without END records; redeliveries at each stage; replays
after a restart; late rows and parts (documented results); the snapshot; a tombstone;
garbage; retention; the hook into the domain."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from sagas.contracts import legacy as lg
from sagas.debezium import decode_change, decode_transaction_marker
from sagas.definitions.legacy_actions import ActionCorrelator, ActionState
from sagas.definitions.legacy_correlator import (
    LegacyCorrelator,
    TransactionState,
    classify,
    correlation_key,
    transaction_key,
)
from sagas.ids import derive_id
from sagas.machinery.step import step
from sagas.messages import ContractError, Envelope, Message

from .helpers import T0, Bus, at
from .test_debezium_decode import SCENARIOS, records

pytestmark = pytest.mark.unit

WINDOW = timedelta(seconds=10)
HOLD = 2 * WINDOW
TX, ACTIONS, DOMAIN = "legacy-tx", "legacy-actions", "legacy-domain"

JHON = lg.StudentRow(id="s-jhon", name="Jhon", email="jhon@school.test", max_credits=20)
PHYSICS = lg.CourseRow(id="c-physics", title="Physics", teacher="Curie", capacity=30, credits=5)
ANA = lg.StudentRow(id="s-ana", name="Ana", email="ana@school.test", max_credits=18)
CHEM = lg.CourseRow(id="c-chem", title="Chemistry", teacher="Lavoisier", capacity=25, credits=4)


def rows(schemas: bool, scenario: str) -> list[lg.RowChanged]:
    wanted = set(SCENARIOS[scenario])
    found = []
    for r in records(schemas):
        if r["topic"].endswith(".transaction"):
            continue
        change = decode_change(r["value"])
        if change is not None and change.tx_id in wanted and not change.snapshot:
            found.append(change)
    return found


def snapshot_rows(schemas: bool) -> list[lg.RowChanged]:
    return [
        c
        for r in records(schemas)
        if not r["topic"].endswith(".transaction")
        and (c := decode_change(r["value"])) is not None
        and c.snapshot
    ]


def end_of(schemas: bool, tx_id: int) -> lg.TransactionEnded:
    for r in records(schemas):
        if r["topic"].endswith(".transaction"):
            marker = decode_transaction_marker(r["value"])
            if marker.status == "END" and marker.tx_id == tx_id:
                assert marker.event_count is not None
                return lg.TransactionEnded(tx_id=tx_id, event_count=marker.event_count)
    raise AssertionError(f"no END for {tx_id}")


def as_envelope(message: Message, *, redelivery: int = 0) -> Envelope:
    """What the thin agent sends: keyed by correlation key, with an id derived from the
    source position. A redelivered copy that kept its id is dropped by the machinery; the
    ``redelivery`` tag gives it a new id, so the correlator's own dedupe is what is tested."""
    if isinstance(message, lg.RowChanged):
        key, ident = correlation_key(message), message.position
    else:
        assert isinstance(message, lg.TransactionEnded)
        key, ident = transaction_key(message), f"end/{message.tx_id}"
    tag = ident if redelivery == 0 else f"{ident}#{redelivery}"
    return Envelope.wrap(message, message_id=derive_id("debezium", tag), key=key, occurred_at=T0)


@dataclass
class Pipeline:
    """Both stages on one bus, a clock, and ticks every second (the worker's tick loop)."""

    snapshot_events: bool = False
    domain: str | None = None
    retention: timedelta = timedelta(hours=1)
    clock: float = 0.0
    bus: Bus = field(init=False)

    def __post_init__(self) -> None:
        stage1 = LegacyCorrelator(
            WINDOW, self.snapshot_events, actions=ACTIONS, retention=self.retention, name=TX
        )
        stage2 = ActionCorrelator(
            hold=HOLD, retention=self.retention, domain_channel=self.domain, name=ACTIONS
        )
        self.bus = Bus.of(stage1, stage2)
        if self.domain is not None:
            self.bus.paused.add(self.domain)  # nothing listens: keep what is sent there

    def advance(self, to: float) -> None:
        second = math.floor(self.clock) + 1
        while second < to:
            self.bus.tick(at(second))
            second += 1
        self.bus.tick(at(to))
        self.clock = max(self.clock, to)

    def feed(self, when: float, *messages: Message, redelivery: int = 0) -> None:
        self.advance(when)
        for m in messages:
            self.bus.send(TX, as_envelope(m, redelivery=redelivery), at(when))

    def part(self, when: float, part: lg.ActionPart, key: str, message_id: str) -> None:
        self.advance(when)
        env = Envelope.wrap(part, message_id=message_id, key=key, occurred_at=at(when))
        self.bus.send(ACTIONS, env, at(when))

    def events(self) -> list[Message]:
        return [e.message() for e in self.bus.published]


def run(timeline: Iterable[tuple[float, Message]], *, until: float = 60.0) -> list[Message]:
    p = Pipeline()
    for when, m in timeline:
        p.feed(when, m)
    p.advance(until)
    return p.events()


def one_by_one(messages: Iterable[Message], *, gap: float = 0.1) -> list[tuple[float, Message]]:
    return [(i * gap, m) for i, m in enumerate(messages)]


def jhon_enrolled(tx_ids: tuple[int, ...]) -> lg.StudentEnrolled:
    return lg.StudentEnrolled(
        student_id="s-jhon",
        course_id="c-physics",
        student=JHON,
        course=PHYSICS,
        student_created=True,
        course_created=True,
        tx_ids=tx_ids,
    )


def ana_enrolled(tx_ids: tuple[int, ...]) -> lg.StudentEnrolled:
    return lg.StudentEnrolled(
        student_id="s-ana",
        course_id="c-chem",
        student=ANA,
        course=CHEM,
        student_created=True,
        course_created=True,
        tx_ids=tx_ids,
    )


SHAPES = pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "plain"])


# --- one action in one transaction ---------------------------------------------------------


@SHAPES
@pytest.mark.parametrize("end", ["none", "first", "last"])
def test_one_transaction_enrollment_in_every_order_is_one_event(schemas: bool, end: str) -> None:
    three = rows(schemas, "enroll_one_transaction")
    (tx,) = SCENARIOS["enroll_one_transaction"]
    for order in itertools.permutations(three):
        feed: list[Message] = list(order)
        if end == "first":
            feed.insert(0, end_of(schemas, tx))
        elif end == "last":
            feed.append(end_of(schemas, tx))
        # With the END record the transaction closes at its last row, before the window;
        # the action is whole (it created both), so stage 2 publishes it at once.
        assert run(one_by_one(feed), until=0.5 if end != "none" else 11) == [
            jhon_enrolled((tx,))
        ], order


@SHAPES
def test_nothing_is_published_before_the_window_ends_without_an_end_record(schemas: bool) -> None:
    p = Pipeline()
    p.feed(0, *rows(schemas, "enroll_one_transaction"))
    p.advance(9.9)
    assert p.events() == []
    p.advance(10)
    assert [type(e) for e in p.events()] == [lg.StudentEnrolled]


@SHAPES
def test_a_row_the_end_record_owes_is_waited_for_past_the_window(schemas: bool) -> None:
    """A worker catching up reads each legacy topic at its own pace: the student row of a
    transaction may come windows after its course, its link and its END record. The END
    record's count keeps the transaction open for it: one whole enrollment, not one without
    its student."""
    three = {r.table: r for r in rows(schemas, "enroll_one_transaction")}
    (tx,) = SCENARIOS["enroll_one_transaction"]
    p = Pipeline()
    p.feed(0, three["course"], three["student_course"], end_of(schemas, tx))
    p.advance(4.5 * WINDOW.total_seconds())
    assert p.events() == []
    p.feed(p.clock, three["student"])
    p.advance(p.clock + 1)
    assert p.events() == [jhon_enrolled((tx,))]


@SHAPES
def test_rows_the_end_record_owes_that_never_come_are_given_up_at_the_retention(
    schemas: bool,
) -> None:
    retention = timedelta(minutes=5)
    three = {r.table: r for r in rows(schemas, "enroll_one_transaction")}
    (tx,) = SCENARIOS["enroll_one_transaction"]
    p = Pipeline(retention=retention)
    p.feed(0, three["course"], three["student_course"], end_of(schemas, tx))
    p.advance(retention.total_seconds() - 1)
    assert p.events() == []
    p.advance(retention.total_seconds() + 3 * WINDOW.total_seconds())
    (enrolled,) = p.events()
    assert isinstance(enrolled, lg.StudentEnrolled)
    assert (enrolled.course_created, enrolled.student_created) == (True, False)
    assert p.bus.state(TX, f"tx:{tx}") == TransactionState()


# --- one action in three transactions ------------------------------------------------------


def three_transactions(schemas: bool) -> dict[str, tuple[lg.RowChanged, lg.TransactionEnded]]:
    """student, course and link, each in its own transaction, with that transaction's END."""
    return {
        r.table: (r, end_of(schemas, r.tx_id or 0))
        for r in rows(schemas, "enroll_three_transactions")
    }


@SHAPES
def test_three_transactions_closed_by_their_end_records_in_every_order_are_one_event(
    schemas: bool,
) -> None:
    """Each row's transaction closes as its END arrives: stage 2 gets the three parts in
    the order the rows came, and merges them whatever that order."""
    txs = SCENARIOS["enroll_three_transactions"]
    for order in itertools.permutations(three_transactions(schemas).values()):
        timeline = [(i * 0.5, m) for i, pair in enumerate(order) for m in pair]
        assert run(timeline) == [ana_enrolled(tuple(txs))], [r.table for r, _ in order]


@SHAPES
def test_three_transactions_with_their_end_records_first_in_every_order_are_one_event(
    schemas: bool,
) -> None:
    txs = SCENARIOS["enroll_three_transactions"]
    for order in itertools.permutations(three_transactions(schemas).values()):
        ends = [end for _, end in order]
        timeline = one_by_one([*ends, *(r for r, _ in order)], gap=1.0)
        assert run(timeline) == [ana_enrolled(tuple(txs))], [r.table for r, _ in order]


@SHAPES
def test_three_transactions_and_their_end_records_in_all_720_orders_are_one_event(
    schemas: bool,
) -> None:
    """Rows and END records on their different topics interleave in any way."""
    txs = SCENARIOS["enroll_three_transactions"]
    six = [m for pair in three_transactions(schemas).values() for m in pair]
    for order in itertools.permutations(six):
        assert run(one_by_one(order), until=45) == [ana_enrolled(tuple(txs))], order


@SHAPES
@pytest.mark.parametrize(
    "together", [("student", "student_course"), ("course", "student_course"), ("student", "course")]
)
def test_two_rows_in_one_transaction_and_one_in_another_in_every_order_are_one_event(
    schemas: bool, together: tuple[str, str]
) -> None:
    """The captured rows of the three-transaction scenario, regrouped into two transactions
    (the pair ``together`` shares the first one's txId): every split of the action."""
    by_table = {r.table: r for r in rows(schemas, "enroll_three_transactions")}
    shared = by_table[together[0]].tx_id
    regrouped = [
        r.model_copy(update={"tx_id": shared}) if r.table in together else r
        for r in by_table.values()
    ]
    ends = [
        lg.TransactionEnded(tx_id=tx, event_count=sum(r.tx_id == tx for r in regrouped))
        for tx in sorted({r.tx_id or 0 for r in regrouped})
    ]
    expected = ana_enrolled(tuple(sorted({r.tx_id or 0 for r in regrouped})))
    for order in itertools.permutations([*regrouped, *ends]):
        assert run(one_by_one(order), until=45) == [expected], order


@SHAPES
@pytest.mark.parametrize("spread", [0.1, 4.0, 9.0])
def test_three_transactions_within_the_window_without_end_records_are_one_event(
    schemas: bool, spread: float
) -> None:
    """No transaction metadata: each transaction closes at its window's end, so the parts
    reach stage 2 as far apart as the rows were (up to a window)."""
    txs = SCENARIOS["enroll_three_transactions"]
    for order in itertools.permutations(rows(schemas, "enroll_three_transactions")):
        timeline = [(i * spread / 2, m) for i, m in enumerate(order)]
        assert run(timeline, until=70) == [ana_enrolled(tuple(txs))], [r.table for r in order]


@SHAPES
def test_parts_two_windows_apart_still_merge(schemas: bool) -> None:
    """The worst spread stage 2 is built for: one transaction closed at once by its END,
    the next only by its window, a window later: the parts come 2W apart, within the hold."""
    three = three_transactions(schemas)
    student, student_end = three["student"]
    course, _ = three["course"]
    link, link_end = three["student_course"]
    timeline = [
        (0.0, student),
        (0.0, student_end),  # student part at stage 2 at 0
        (9.5, course),  # no END: its part at 19.5
        (9.5, link),
        (9.5, link_end),  # link part at 9.5
    ]
    events = run(timeline, until=80)
    assert events == [ana_enrolled(tuple(SCENARIOS["enroll_three_transactions"]))]


@SHAPES
def test_a_link_alone_is_published_three_windows_after_it_came(schemas: bool) -> None:
    """The worst-case delay the module documents: W at stage 1 (no END record), then a 2W
    hold for a creation of the student, and of the course, that never comes."""
    link = next(
        r for r in rows(schemas, "enroll_three_transactions") if r.table == "student_course"
    )
    p = Pipeline()
    p.feed(0, link)
    p.advance(3 * WINDOW.total_seconds() - 0.1)
    assert p.events() == []
    p.advance(3 * WINDOW.total_seconds())
    assert p.events() == [
        lg.StudentEnrolled(
            student_id="s-ana",
            course_id="c-chem",
            student=None,
            course=None,
            student_created=False,
            course_created=False,
            tx_ids=(link.tx_id or 0,),
        )
    ]


# --- redeliveries and restarts ---------------------------------------------------------------


@SHAPES
def test_redelivered_rows_yield_no_second_event(schemas: bool) -> None:
    """Debezium redelivers after a connector restart (new Kafka records: new ids)."""
    txs = SCENARIOS["enroll_three_transactions"]
    three = rows(schemas, "enroll_three_transactions")
    p = Pipeline()
    for copy in range(2):  # within the window
        p.feed(copy * 0.5, *three, redelivery=copy)
    p.advance(40)
    p.feed(41, *three, redelivery=2)  # after everything was published
    p.feed(42, *three)  # the very same records: the machinery drops them
    p.advance(100)
    assert p.events() == [ana_enrolled(tuple(txs))]


@SHAPES
def test_replaying_the_whole_input_after_a_restart_yields_nothing_new(schemas: bool) -> None:
    """A worker restart re-reads its input from its stored positions; a connector restart
    re-sends what Debezium had not committed. Either way, with the states kept, nothing new."""
    inputs: list[Message] = []
    for scenario in SCENARIOS:
        if scenario != "snapshot_seed":
            for r in rows(schemas, scenario):
                inputs += [r, end_of(schemas, r.tx_id or 0)]
    inputs += snapshot_rows(schemas)
    p = Pipeline()
    for i, m in enumerate(inputs):
        p.feed(i * 0.2, m)
    p.advance(60)
    first = p.events()
    assert len(first) == 6  # two enrollments, a move, an email, a capacity, a drop
    for redelivery in (0, 1):  # same ids (worker), new ids (connector)
        p.feed(p.clock + 1, *inputs, redelivery=redelivery)
        p.advance(p.clock + 60)
    assert p.events() == first


@SHAPES
def test_a_part_or_claim_sent_twice_to_stage_two_is_dropped(schemas: bool) -> None:
    """Stage 2's own dedupe (the part id derives from the rows' positions), for a part that
    stage 1 sends again under another message id."""
    link = next(r for r in rows(schemas, "enroll_one_transaction") if r.table == "student_course")
    (event,) = classify((link,))
    part = lg.ActionPart(part_id="part-1", event=event, lsn=link.lsn)
    claim = lg.ClaimCourse(claim_id="claim-1", student_id="s-jhon", course_id="c-physics")
    p = Pipeline()
    p.part(0, part, "student:s-jhon", "m1")
    p.part(1, part, "student:s-jhon", "m2")
    claims = [o for o in p.bus.records if o[0] == ACTIONS]
    assert sorted(claims) == [(ACTIONS, "course:c-physics"), (ACTIONS, "student:s-jhon")]
    course: ActionState = p.bus.state(ACTIONS, "course:c-physics")
    assert len(course.claims) == 1
    p.bus.send(
        ACTIONS, Envelope.wrap(claim, message_id="m3", key="course:c-physics", occurred_at=T0)
    )
    p.bus.send(
        ACTIONS, Envelope.wrap(claim, message_id="m4", key="course:c-physics", occurred_at=T0)
    )
    assert len(p.bus.state(ACTIONS, "course:c-physics").claims) == 2
    p.advance(60)
    assert [type(e) for e in p.events()] == [lg.StudentEnrolled]


def test_event_ids_are_deterministic() -> None:
    """Re-running the same input (a worker restart before its state was stored) re-creates
    the same message ids, so consumers drop the copies."""

    def ids() -> list[str]:
        p = Pipeline()
        for i, m in enumerate(rows(False, "enroll_three_transactions")):
            p.feed(i * 0.1, m)
        p.advance(40)
        return [e.message_id for e in p.bus.published]

    assert ids() == ids() and len(ids()) == 1


# --- late rows and parts: the documented results ---------------------------------------------


@SHAPES
def test_a_late_row_of_a_closed_transaction_still_merges_while_its_action_is_held(
    schemas: bool,
) -> None:
    """Stage 1 closed the transaction without the link (window over); the link comes after
    it, alone, but stage 2 still holds the student's and the course's creations."""
    by_table = {c.table: c for c in rows(schemas, "enroll_one_transaction")}
    (tx,) = SCENARIOS["enroll_one_transaction"]
    p = Pipeline()
    p.feed(0, by_table["student"], by_table["course"])
    p.feed(12, by_table["student_course"])
    p.advance(60)
    assert p.events() == [jhon_enrolled((tx,))]


@SHAPES
def test_a_link_after_the_hold_is_an_enrollment_without_creations(schemas: bool) -> None:
    """Documented: the student and the course were published as created alone; the late
    enrollment carries no `created` flag, and the rows the correlator last saw."""
    by_table = {c.table: c for c in rows(schemas, "enroll_three_transactions")}
    p = Pipeline()
    p.feed(0, by_table["student"], by_table["course"])
    p.advance(31)  # W at stage 1 + the 2W hold: both published
    p.feed(40, by_table["student_course"])
    p.advance(100)
    student, course, enrolled = p.events()
    assert isinstance(student, lg.StudentUpdated) and student.created
    assert isinstance(course, lg.CourseUpdated) and course.created
    assert enrolled == lg.StudentEnrolled(
        student_id="s-ana",
        course_id="c-chem",
        student=ANA,
        course=CHEM,
        student_created=False,
        course_created=False,
        tx_ids=(by_table["student_course"].tx_id or 0,),
    )
    # Known to exist: the late enrollment waited for nothing (published at its window end).
    assert p.bus.published[-1].occurred_at == at(50)


@SHAPES
def test_creations_after_the_enrollment_was_published_are_published_alone(
    schemas: bool,
) -> None:
    """Documented: never lost, never a second enrollment."""
    by_table = {c.table: c for c in rows(schemas, "enroll_three_transactions")}
    p = Pipeline()
    p.feed(0, by_table["student_course"])
    p.advance(31)
    p.feed(40, by_table["course"], by_table["student"])
    p.advance(100)
    enrolled, *others = p.events()
    course, student = sorted(others, key=lambda e: e.TYPE)  # two keys: no order between them
    assert isinstance(enrolled, lg.StudentEnrolled)
    assert not enrolled.student_created and not enrolled.course_created
    assert isinstance(course, lg.CourseUpdated) and course.created and course.course == CHEM
    assert isinstance(student, lg.StudentUpdated) and student.created and student.student == ANA


def test_a_course_created_once_goes_to_the_first_enrollment_that_claims_it() -> None:
    """Two students enrolled within the window in a course created in its own transaction:
    one event carries the creation, the other does not; the course publishes nothing."""
    course = lg.CourseUpdated(
        course_id="c", course=lg.CourseRow(id="c"), changed=(), created=True, tx_ids=(1,)
    )
    p = Pipeline()
    p.part(0, lg.ActionPart(part_id="p1", event=course, lsn=1), "course:c", "m1")
    for i, sid in enumerate(("a", "b"), 2):
        enrolled = classify(
            (
                change("student_course", "c", None, {"student_id": sid, "course_id": "c"}),
                change("student", "u", {"id": sid}, {"id": sid, "name": sid}),
            )
        )[0]
        p.part(i, lg.ActionPart(part_id=f"p{i}", event=enrolled, lsn=i), f"student:{sid}", f"m{i}")
    p.advance(60)
    flags = [(e.student_id, e.course_created) for e in p.events()]  # type: ignore[attr-defined]
    assert flags == [("a", True), ("b", False)]


# --- one event per other kind of action --------------------------------------------------------


@SHAPES
def test_a_link_moved_to_another_course_is_one_enrollment_changed(schemas: bool) -> None:
    moved = rows(schemas, "enrollment_course_changed")
    (tx,) = SCENARIOS["enrollment_course_changed"]
    for order in itertools.permutations(moved):
        assert run(one_by_one([*order, end_of(schemas, tx)]), until=1) == [
            lg.EnrollmentChanged(
                student_id="s-ana",
                from_course_id="c-chem",
                course_id="c-physics",
                course=None,
                tx_ids=(tx,),
            )
        ]


@SHAPES
def test_an_email_update_is_one_student_updated(schemas: bool) -> None:
    (tx,) = SCENARIOS["student_email_updated"]
    assert run(one_by_one([*rows(schemas, "student_email_updated"), end_of(schemas, tx)])) == [
        lg.StudentUpdated(
            student_id="s-jhon",
            student=JHON.model_copy(update={"email": "jhon.doe@school.test"}),
            changed=("email",),
            created=False,
            tx_ids=(tx,),
        )
    ]


@SHAPES
def test_a_course_update_is_one_course_updated(schemas: bool) -> None:
    (event,) = run(one_by_one(rows(schemas, "course_capacity_updated")), until=10)
    assert isinstance(event, lg.CourseUpdated)
    assert (event.course_id, event.changed, event.created) == ("c-physics", ("capacity",), False)


@SHAPES
def test_a_link_delete_is_one_enrollment_dropped(schemas: bool) -> None:
    (tx,) = SCENARIOS["enrollment_dropped"]
    assert run(one_by_one(rows(schemas, "enrollment_dropped")), until=10) == [
        lg.EnrollmentDropped(student_id="s-jhon", course_id="c-physics", tx_ids=(tx,))
    ]


@SHAPES
def test_an_entitys_events_are_published_in_arrival_order(schemas: bool) -> None:
    """An email update behind the student's held creation waits for it: a consumer never
    sees a student updated before it was created."""
    created = rows(schemas, "enroll_one_transaction")[0]
    update = rows(schemas, "student_email_updated")[0]
    assert created.table == update.table == "student"
    events = run([(0, created), (1, update)])
    assert [(type(e).__name__, e.created) for e in events] == [  # type: ignore[attr-defined]
        ("StudentUpdated", True),
        ("StudentUpdated", False),
    ]


# --- snapshot, tombstones, garbage -------------------------------------------------------------


@SHAPES
def test_snapshot_rows_seed_no_events_unless_configured(schemas: bool) -> None:
    seed = snapshot_rows(schemas)
    assert len(seed) == 1
    assert run([(0, seed[0])]) == []
    p = Pipeline(snapshot_events=True)
    p.feed(0, seed[0])
    p.advance(60)
    (event,) = p.events()
    assert isinstance(event, lg.StudentUpdated) and event.created


@SHAPES
def test_tombstones_decode_to_nothing_and_garbage_is_refused(schemas: bool) -> None:
    """The ingest agent drops what decodes to None; a ContractError (with its reason) goes
    to the dead-letter topic; an envelope that breaks the RowChanged contract on the
    correlator's own channel is refused by the machinery (dead-lettered by the worker)."""
    tombstones = [
        r
        for r in records(schemas)
        if not r["topic"].endswith(".transaction") and decode_change(r["value"]) is None
    ]
    assert len(tombstones) == 2
    with pytest.raises(ContractError, match="no `source`"):
        decode_change(b'{"op": "c", "after": {"id": "x"}}')
    good = rows(schemas, "enroll_one_transaction")[0]
    bad = Envelope.wrap(good, message_id="bad", key=correlation_key(good), occurred_at=T0)
    bad = bad.model_copy(update={"payload": {**bad.payload, "lsn": -1}})
    with pytest.raises(ContractError, match="lsn"):
        step(LegacyCorrelator(WINDOW), None, bad, T0)


# --- into the domain, retention ---------------------------------------------------------------


@SHAPES
def test_with_a_domain_channel_every_published_event_is_also_sent_there(schemas: bool) -> None:
    p = Pipeline(domain=DOMAIN)
    for i, scenario in enumerate(("enroll_three_transactions", "course_capacity_updated")):
        for r in rows(schemas, scenario):
            p.feed(i * 5, r)
    p.advance(60)
    held = [(o.channel, o.envelope.key, o.envelope.message()) for o in p.bus._held]
    published = p.events()
    assert [m for _, _, m in held] == published and len(published) == 2
    assert {(c, k) for c, k, _ in held} == {(DOMAIN, "s-ana"), (DOMAIN, "course:c-physics")}


@SHAPES
def test_an_idle_key_is_reset_after_the_retention(schemas: bool) -> None:
    """The machinery cannot delete a key: its state goes back to empty, its record keeps
    the machinery's window of message ids, which still drops a same-id redelivery."""
    retention = timedelta(minutes=5)
    three = rows(schemas, "enroll_one_transaction")
    (tx,) = SCENARIOS["enroll_one_transaction"]
    p = Pipeline(retention=retention)
    p.feed(0, *three)
    p.advance(20)
    assert p.bus.state(TX, f"tx:{tx}") != TransactionState()
    assert p.bus.state(ACTIONS, "student:s-jhon") != ActionState()
    p.advance(20 + retention.total_seconds())
    assert p.bus.state(TX, f"tx:{tx}") == TransactionState()
    assert p.bus.state(ACTIONS, "student:s-jhon") == ActionState()
    assert p.bus.records[(TX, f"tx:{tx}")].deadlines == {}
    p.feed(p.clock + 1, *three)  # the same records again: dropped by their ids
    p.advance(p.clock + 60)
    assert len(p.events()) == 1


# --- classify() on hand-made rows: cases the fixtures do not cover -------------------------

_lsn = itertools.count(1000)


def change(
    table: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> lg.RowChanged:
    model = lg.ROW_MODELS[table]
    row = after if after is not None else before
    assert row is not None
    key = "/".join(str(v) for k, v in row.items() if k in ("id", "student_id", "course_id"))
    lsn = next(_lsn)
    return lg.RowChanged(
        table=table,
        op=op,
        before=None if before is None else model.model_validate(before),
        after=None if after is None else model.model_validate(after),
        tx_id=7,
        lsn=lsn,
        ts_ms=1,
        snapshot=False,
        position=f"{lsn}/{table}/{op}/{key}",
    )


def test_two_students_enrolled_in_one_transaction_are_two_events() -> None:
    events = classify(
        (
            change("student_course", "c", None, {"student_id": "a", "course_id": "x"}),
            change("student_course", "c", None, {"student_id": "b", "course_id": "x"}),
            change("student", "c", None, {"id": "b", "name": "B"}),
        )
    )
    assert [(type(e).__name__, e.student_id, e.student_created) for e in events] == [  # type: ignore[union-attr]
        ("StudentEnrolled", "a", False),
        ("StudentEnrolled", "b", True),
    ]


def test_an_update_that_changes_nothing_yields_nothing() -> None:
    same = {"id": "s", "name": "S", "email": "s@x", "max_credits": 3}
    assert classify((change("student", "u", same, same),)) == ()


def test_a_link_deleted_and_created_again_in_one_transaction_yields_nothing() -> None:
    link = {"student_id": "s", "course_id": "c"}
    assert (
        classify(
            (change("student_course", "d", link, None), change("student_course", "c", None, link))
        )
        == ()
    )


def test_two_updates_of_one_row_in_one_transaction_are_one_event_with_both_fields() -> None:
    v0 = {"id": "c", "title": "T", "teacher": "A", "capacity": 1, "credits": 1}
    v1 = {**v0, "capacity": 2}
    v2 = {**v1, "teacher": "B"}
    (event,) = classify((change("course", "u", v0, v1), change("course", "u", v1, v2)))
    assert isinstance(event, lg.CourseUpdated)
    assert event.changed == ("teacher", "capacity") and event.course.teacher == "B"


def test_a_student_updated_with_an_enrollment_is_carried_by_the_enrollment() -> None:
    old = {"id": "s", "name": "S", "email": "old@x", "max_credits": 3}
    new = {**old, "email": "new@x"}
    (event,) = classify(
        (
            change("student", "u", old, new),
            change("student_course", "c", None, {"student_id": "s", "course_id": "c"}),
        )
    )
    assert isinstance(event, lg.StudentEnrolled)
    assert event.student is not None and event.student.email == "new@x"
    assert not event.student_created and not event.course_created and event.course is None


def test_a_snapshot_row_of_long_ids_still_has_a_key_that_fits_an_envelope() -> None:
    link = {"student_id": "s" * 100, "course_id": "c" * 100}
    row = change("student_course", "r", None, link).model_copy(update={"snapshot": True})
    key = correlation_key(row)
    assert key.startswith("row:") and len(key) <= 200
    assert key == correlation_key(row)
    Envelope.wrap(row, message_id="m", key=key, occurred_at=T0)


def test_a_row_deleted_alone_yields_nothing_yet() -> None:
    """No business event is defined for a student or course deleted alone (issue 10)."""
    assert classify((change("student", "d", {"id": "s"}, None),)) == ()
