"""Decoding real Debezium records (tests/fixtures/debezium/, captured from the pipeline) as
untrusted input: both JSON converter shapes give the same row changes; tombstones are
ignored; anything else is a ContractError with a bounded reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sagas.contracts.legacy import CourseRow, LinkRow, RowChanged, StudentRow
from sagas.debezium import decode_change, decode_transaction_marker
from sagas.untrusted import MAX_REASON_LENGTH, ContractError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
SCENARIOS: dict[str, list[int]] = json.loads((FIXTURES / "scenarios.json").read_text())


def records(schemas: bool) -> list[dict[str, Any]]:
    path = FIXTURES / f"schemas-{'true' if schemas else 'false'}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def changes(schemas: bool) -> list[RowChanged]:
    found = []
    for r in records(schemas):
        if r["topic"].endswith(".transaction"):
            continue
        change = decode_change(r["value"])
        if change is not None:
            found.append(change)
    return found


def of_tx(tx_id: int, schemas: bool = False) -> list[RowChanged]:
    return [c for c in changes(schemas) if c.tx_id == tx_id]


@pytest.mark.parametrize("schemas", [True, False])
def test_every_change_record_decodes_and_tombstones_are_none(schemas: bool) -> None:
    table_records = [r for r in records(schemas) if not r["topic"].endswith(".transaction")]
    decoded = [decode_change(r["value"]) for r in table_records]
    tombstones = [r for r, d in zip(table_records, decoded, strict=True) if d is None]
    assert [r["value"] for r in tombstones] == [None, None]  # the two deletes' tombstones
    # 1 snapshot row, 3 + 3 inserts, a moved link (delete + create), 2 updates, 1 delete
    assert len([d for d in decoded if d is not None]) == 12


def streamed(schemas: bool) -> list[RowChanged]:
    """The changes after the snapshot, in WAL order (each capture connector took its own
    snapshot, at its own LSN; the stream after it is the same for both)."""
    return sorted((c for c in changes(schemas) if not c.snapshot), key=lambda c: c.position)


def test_both_converter_shapes_give_the_same_changes() -> None:
    assert streamed(schemas=True) == streamed(schemas=False)
    assert [c.after for c in changes(True) if c.snapshot] == [
        c.after for c in changes(False) if c.snapshot
    ]


def test_the_snapshot_read_is_marked() -> None:
    (seed,) = [c for c in changes(False) if c.op == "r"]
    assert seed.snapshot and seed.table == "student"
    assert seed.after == StudentRow(
        id="s-seed", name="Seed", email="seed@school.test", max_credits=12
    )
    assert all(not c.snapshot for c in changes(False) if c.op != "r")


def test_one_transaction_enrollment_shares_a_tx_id() -> None:
    (tx,) = SCENARIOS["enroll_one_transaction"]
    rows = of_tx(tx)
    assert sorted(c.table for c in rows) == ["course", "student", "student_course"]
    assert {c.op for c in rows} == {"c"}
    link = next(c for c in rows if c.table == "student_course")
    assert link.after == LinkRow(student_id="s-jhon", course_id="c-physics")
    assert link.row() == link.after


def test_three_transactions_have_three_tx_ids() -> None:
    txs = SCENARIOS["enroll_three_transactions"]
    assert [[c.table for c in of_tx(tx)] for tx in txs] == [
        ["student"],
        ["course"],
        ["student_course"],
    ]


def test_a_course_change_of_a_link_is_a_delete_and_a_create_in_one_transaction() -> None:
    (tx,) = SCENARIOS["enrollment_course_changed"]
    rows = of_tx(tx)
    assert [(c.op, c.row()) for c in rows] == [
        ("d", LinkRow(student_id="s-ana", course_id="c-chem")),
        ("c", LinkRow(student_id="s-ana", course_id="c-physics")),
    ]
    # One LSN for both: the position must tell them apart.
    assert rows[0].lsn == rows[1].lsn and rows[0].position != rows[1].position


def test_an_update_carries_the_whole_old_row() -> None:
    (tx,) = SCENARIOS["student_email_updated"]
    (update,) = of_tx(tx)
    assert update.op == "u"
    assert isinstance(update.before, StudentRow) and isinstance(update.after, StudentRow)
    assert (update.before.email, update.after.email) == ("jhon@school.test", "jhon.doe@school.test")
    (tx,) = SCENARIOS["course_capacity_updated"]
    (course,) = of_tx(tx)
    assert isinstance(course.after, CourseRow) and course.after.capacity == 35


def test_positions_are_unique_and_stable_across_redelivery() -> None:
    all_changes = changes(False)
    assert len({c.position for c in all_changes}) == len(all_changes)
    assert [c.position for c in streamed(True)] == [c.position for c in streamed(False)]


@pytest.mark.parametrize("schemas", [True, False])
def test_transaction_markers(schemas: bool) -> None:
    markers = [
        decode_transaction_marker(r["value"])
        for r in records(schemas)
        if r["topic"].endswith(".transaction")
    ]
    (tx,) = SCENARIOS["enroll_one_transaction"]
    end = next(m for m in markers if m.tx_id == tx and m.status == "END")
    assert end.event_count == 3
    assert dict(end.per_table) == {
        "school.course": 1,
        "school.student": 1,
        "school.student_course": 1,
    }
    assert {m.status for m in markers} == {"BEGIN", "END"}


def _a_change(**overrides: Any) -> str:
    first_link = next(
        json.loads(r["value"])
        for r in records(False)
        if r["topic"].endswith("student_course") and r["value"] is not None
    )
    for path, value in overrides.items():
        target = first_link
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return json.dumps(first_link)


_DELETE = object()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        ("[1, 2]", "not a JSON object"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "nested deeper"),
        ("{" * 5000, "object keys must be strings"),
        ("{}", "no `source`"),
        (_a_change(op="x"), "unknown op"),
        (_a_change(op="t"), "unknown op"),  # a TRUNCATE event: not an action we map
        (_a_change(source__table="teacher"), "unknown table"),
        (_a_change(source__schema="public"), "is not 'school'"),
        (_a_change(after=None), "without `after`"),
        (_a_change(before={"student_id": "s", "course_id": "c"}), "with `before`"),
        (_a_change(after__student_id=""), "no primary key"),
        (_a_change(after__course_id=7), "no primary key"),
        (_a_change(after__extra="x"), "Extra inputs"),
        (_a_change(source__lsn=-1), "lsn"),
        (_a_change(source__lsn=_DELETE), "lsn"),
        (_a_change(source__snapshot="maybe"), "source.snapshot"),
        (_a_change(after__student_id="s" * 101), "student_id"),
        ('{"schema": {}, "payload": 3}', "`payload` is not an object"),
    ],
)
def test_garbage_is_a_contract_error_with_a_bounded_reason(raw: str | bytes, reason: str) -> None:
    with pytest.raises(ContractError) as caught:
        decode_change(raw)
    assert reason in str(caught.value)
    assert len(str(caught.value)) <= MAX_REASON_LENGTH


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "{}",
        '{"status": "BEGIN", "id": "x:1"}',
        '{"status": "BEGIN", "id": "\u00b2:1"}',  # "²": str.isdigit() takes it, int() not
        '{"status": "END", "id": "5:1"}',
        '{"status": "END", "id": "5", "event_count": 1, "data_collections": [3]}',
    ],
)
def test_bad_transaction_markers_are_contract_errors(raw: str | None) -> None:
    with pytest.raises(ContractError):
        decode_transaction_marker(raw)
