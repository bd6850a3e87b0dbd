"""Input positions: the worker resumes where its own stored state says, never past a record."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sagas.contracts import ledger as lc
from sagas.messages import Envelope
from services.worker.deadletter import DeadLetter
from services.worker.positions import RESEEK_AFTER_S, InputPositions, Rewind
from services.worker.runner import DictTable
from tests.unit.test_runner import FakeKafka, incoming, runner

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class At:
    topic: str
    partition: int
    offset: int


def offsets(*values: int, partition: int = 0) -> list[At]:
    return [At("t", partition, o) for o in values]


def run(positions: InputPositions, records: list[At], now: float = 0.0) -> list[str]:
    plan = positions.plan(records, now)
    positions.commit(plan)
    return list(plan.verdicts)


def test_a_fresh_partition_takes_what_comes_and_then_expects_the_next_offset() -> None:
    positions = InputPositions(lambda topic, partition: None)
    assert run(positions, offsets(5, 6, 7)) == ["process"] * 3
    assert run(positions, offsets(8)) == ["process"]


def test_a_stored_position_skips_what_was_processed_before_it() -> None:
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(8, 9, 10, 11)) == ["replayed", "replayed", "process", "process"]


def test_a_record_past_a_gap_is_not_processed_and_asks_for_a_seek_back() -> None:
    positions = InputPositions(lambda topic, partition: 10)
    plan = positions.plan(offsets(13, 14, 15), now=0.0)
    assert plan.verdicts == ["past_gap", "stale", "stale"]
    assert plan.rewinds == [Rewind("t", 0, 10)]
    assert plan.next_offsets() == {("t", 0): 10}
    positions.commit(plan)
    # What the seek brings back: the missing records first, then the rest again.
    assert run(positions, offsets(10, 11, 12, 13, 14, 15, 16)) == ["process"] * 7


def test_stale_runs_past_the_gap_are_skipped_however_they_interleave() -> None:
    # Several fetches made before the seek may arrive, even repeating offsets: none of them
    # is processed until the expected offset itself shows up.
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(13, 14), now=0.0) == ["past_gap", "stale"]
    assert run(positions, offsets(15, 13, 14, 20), now=1.0) == ["stale"] * 4
    assert run(positions, offsets(10, 11), now=2.0) == ["process", "process"]


def test_the_seek_is_asked_for_again_when_records_past_the_gap_keep_coming() -> None:
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(13), now=0.0) == ["past_gap"]
    assert run(positions, offsets(14), now=RESEEK_AFTER_S - 0.1) == ["stale"]
    plan = positions.plan(offsets(15), now=RESEEK_AFTER_S + 0.1)
    assert (plan.verdicts, plan.rewinds) == (["past_gap"], [Rewind("t", 0, 10)])


def test_a_seek_lost_with_nothing_after_it_is_asked_for_again_on_the_timer() -> None:
    # Defect 13: the records the seek fetches again are dropped by Faust and nothing more
    # comes; only overdue() notices.
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(13, 14), now=0.0) == ["past_gap", "stale"]
    assert positions.overdue(now=RESEEK_AFTER_S - 0.1) == []
    assert positions.overdue(now=RESEEK_AFTER_S) == [Rewind("t", 0, 10)]
    assert positions.overdue(now=RESEEK_AFTER_S + 1) == []  # timed from the new request
    assert positions.overdue(now=2 * RESEEK_AFTER_S) == [Rewind("t", 0, 10)]
    assert run(positions, offsets(10), now=2 * RESEEK_AFTER_S) == ["process"]
    assert positions.overdue(now=10 * RESEEK_AFTER_S) == []  # the expected record came


def test_nothing_is_overdue_without_a_gap_nor_after_a_rebalance() -> None:
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(10, 11), now=0.0) == ["process", "process"]
    assert positions.overdue(now=100.0) == []
    assert run(positions, offsets(20), now=100.0) == ["past_gap"]
    positions.forget()  # the assignment seeks every partition to its stored position
    assert positions.overdue(now=200.0) == []


def test_offsets_the_broker_says_do_not_exist_are_skipped() -> None:
    # Retention deleted 10..12 (or they were transaction markers).
    positions = InputPositions(lambda topic, partition: 10)
    assert run(positions, offsets(13, 14)) == ["past_gap", "stale"]
    assert not positions.skip_missing("t", 0, missing_from=9, exists_from=13)  # moved on
    assert positions.skip_missing("t", 0, missing_from=10, exists_from=13)
    assert run(positions, offsets(13, 14, 15)) == ["process"] * 3


def test_planning_moves_nothing_until_committed_so_a_failed_batch_is_planned_again() -> None:
    positions = InputPositions(lambda topic, partition: 10)
    first = positions.plan(offsets(10, 11), now=0.0)
    again = positions.plan(offsets(10, 11), now=0.0)
    assert first.verdicts == again.verdicts == ["process", "process"]


def test_partitions_are_independent_and_forget_rereads_the_store() -> None:
    stored = {("t", 0): 5, ("t", 1): 0}
    positions = InputPositions(lambda topic, partition: stored.get((topic, partition)))
    records = [*offsets(5, partition=0), *offsets(0, partition=1), *offsets(6, partition=0)]
    assert run(positions, records) == ["process", "process", "process"]
    stored[("t", 0)] = 20  # another worker went further while the partition was away
    positions.forget()
    assert run(positions, offsets(7, 20)) == ["replayed", "process"]


async def test_the_runner_stores_positions_after_the_states_and_only_when_sent() -> None:
    table = DictTable()
    failing = runner(FakeKafka(fail=True), table)
    batch = [incoming(lc.SetCapacity(on_hand=3), "p1", 0)]
    with pytest.raises(ConnectionError):
        await failing.handle_batch(batch)
    assert (dict(table), table.positions) == ({}, {})
    # Retried on the same runner (as the agent does): the batch is planned again, not skipped.
    failing.send = FakeKafka().send
    await failing.handle_batch(batch)
    assert set(table) == {"p1"}
    assert table.positions == {("t.inventory", 0): 1}


async def test_the_runner_seeks_back_over_a_gap_and_processes_nothing_past_it() -> None:
    kafka, table = FakeKafka(), DictTable()
    table.positions[("t.inventory", 0)] = 3
    seeks: list[tuple[str, int, int]] = []

    async def seek(topic: str, partition: int, offset: int) -> None:
        seeks.append((topic, partition, offset))

    r = runner(kafka, table)
    r.seek = seek
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=3), "p1", 5)])
    assert (seeks, kafka.sent, dict(table)) == ([("t.inventory", 0, 3)], [], {})
    assert r.metrics.snapshot()["inventory.rewinds"] == 1


async def test_the_runner_asks_again_for_a_seek_back_that_brought_nothing() -> None:
    kafka, table = FakeKafka(), DictTable()
    table.positions[("t.inventory", 0)] = 3
    seeks: list[tuple[str, int, int]] = []
    now = [0.0]

    async def seek(topic: str, partition: int, offset: int) -> None:
        seeks.append((topic, partition, offset))

    r = runner(kafka, table)
    r.seek, r.monotonic = seek, lambda: now[0]
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=3), "p1", 5)])
    await r.reseek_overdue()
    assert seeks == [("t.inventory", 0, 3)]  # not yet due
    now[0] = RESEEK_AFTER_S
    await r.reseek_overdue()
    assert seeks == [("t.inventory", 0, 3)] * 2
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=3), "p1", 3)])
    now[0] = 10 * RESEEK_AFTER_S
    await r.reseek_overdue()
    assert (len(seeks), set(table)) == (2, {"p1"})


async def test_the_runner_seeks_past_offsets_the_broker_says_hold_no_record() -> None:
    kafka, table = FakeKafka(), DictTable()
    table.positions[("t.inventory", 0)] = 3
    seeks: list[tuple[str, int, int]] = []

    async def seek(topic: str, partition: int, offset: int) -> None:
        seeks.append((topic, partition, offset))

    async def first_offset(topic: str, partition: int, offset: int) -> int | None:
        return 5  # 3 and 4 were deleted by retention

    r = runner(kafka, table)
    r.seek, r.first_offset = seek, first_offset
    record = incoming(lc.SetCapacity(on_hand=3), "p1", 5)
    await r.handle_batch([record])
    assert (seeks, dict(table)) == ([("t.inventory", 0, 5)], {})
    await r.handle_batch([record])  # what the seek delivers
    assert (set(table), table.positions) == ({"p1"}, {("t.inventory", 0): 6})
    assert r.metrics.snapshot()["inventory.offsets_missing"] == 2


async def test_a_decision_whose_message_kafka_would_refuse_is_dead_lettered_not_retried() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    r.max_message_bytes = 10_000
    huge = lc.Reserve(reservation_id="o1:" + "x" * 20_000, quantity=1, ttl_seconds=60)
    batch = [
        incoming(lc.SetCapacity(on_hand=3), "p1", 0),
        incoming(huge, "p1", 1),
        incoming(lc.Reserve(reservation_id="o2:p1", quantity=1, ttl_seconds=60), "p1", 2),
    ]
    await r.handle_batch(batch)
    letters = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert [(d["offset"], "over the 10000-byte limit" in d["reason"]) for d in letters] == [
        (1, True)
    ]
    replies = [Envelope.decode(v).type for t, _, v in kafka.sent if t == "t.order-saga"]
    assert replies == ["ledger.CapacitySet", "ledger.Reserved"]
    assert table.positions == {("t.inventory", 0): 3}


def test_the_next_offset_is_the_stored_one_until_records_move_it() -> None:
    positions = InputPositions(lambda topic, partition: 10 if partition == 0 else None)
    assert positions.next_offset("t", 0) == 10
    assert positions.next_offset("t", 1) is None
    run(positions, offsets(10, 11))
    assert positions.next_offset("t", 0) == 12
    run(positions, offsets(14))  # past a gap: still expects 12
    assert positions.next_offset("t", 0) == 12
