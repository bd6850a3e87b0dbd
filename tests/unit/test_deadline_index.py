"""The deadline index without Kafka: what feeds it, what rebuilds it, and what a rebuild costs
(issue 11: a full rescan every minute decoded every record of every table on the loop)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Iterator
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from pydantic import BaseModel

from runtime.settings import Settings
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts.system import Tick
from sagas.machinery.record import Record
from sagas.machinery.retirement import Retirement
from services.worker import faust_app
from services.worker.deadlines import SLICE_S, YIELD_EVERY, DeadlineIndex, entry_key, indexed_key
from services.worker.runner import DictTable, ProcessRunner, StateWrite
from tests.unit.test_runner import (
    T0,
    CutTable,
    FakeKafka,
    apply,
    incoming,
    order_message,
    order_runner,
    runner,
)

pytestmark = pytest.mark.unit
TTL = 60


class Note(BaseModel):
    text: str = ""


TRICKY = [
    "",
    ',"deadlines":{},"started_at":null,"stepped_at":null}',
    '","deadlines":{},"started_at":null,"stepped_at":null}',
    '\\",\\"deadlines\\":{}',
    "}{",
]


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("deadlines", [{}, {"a": T0}, {"x": T0, "deadlines": T0}, {"{}": T0}])
@pytest.mark.parametrize("started", [None, T0])
def test_a_record_is_told_without_deadlines_from_its_bytes_exactly_when_it_has_none(
    text: str, deadlines: dict[str, datetime], started: datetime | None
) -> None:
    record = Record[Note](
        state=Note(text=text), deadlines=deadlines, started_at=started, stepped_at=started
    )
    assert Record.surely_without_deadlines(record.encode()) == (not deadlines)


def test_bytes_of_another_shape_are_never_taken_for_a_record_without_deadlines() -> None:
    plain = Record[Note](state=Note()).encode()
    for raw in (b"", b"{}", plain[:-1], plain + b" ", plain.replace(b"null", b"1", 1)):
        assert not Record.surely_without_deadlines(raw)


async def _stored(keys: int, reserved: int) -> tuple[DictTable, ProcessRunner]:
    """``keys`` products with capacity, the first ``reserved`` of them holding a reservation
    (an expiry deadline); the rest hold none, as a finished saga's record."""
    table = DictTable()
    r = runner(FakeKafka(), table)
    assert await r.rebuild_deadlines(0.0)  # at start: the empty partition is flagged indexed
    batch = [incoming(lc.SetCapacity(on_hand=5), f"p{i}", i) for i in range(keys)]
    batch += [
        incoming(
            lc.Reserve(reservation_id=f"o{i}:p{i}", quantity=1, ttl_seconds=TTL),
            f"p{i}",
            keys + i,
        )
        for i in range(reserved)
    ]
    for start in range(0, len(batch), 200):
        await r.handle_batch(batch[start : start + 200])
    return table, r


def _fresh(table: DictTable, rescan_every_s: float = 0.0) -> ProcessRunner:
    """A runner over an existing table, as after a restart: its index is stale."""
    r = runner(FakeKafka(), table)
    r.deadlines = DeadlineIndex(rescan_every_s)
    return r


async def test_the_rebuild_on_stale_reads_only_the_index_entries_not_the_records() -> None:
    table, _ = await _stored(keys=300, reserved=7)
    r = _fresh(table)
    assert r.deadlines.stale and r.deadlines.needs_rebuild(0.0)
    codec = Record.codec(r.process.state_type)
    with mock.patch.object(codec, "model_validate_json", wraps=codec.model_validate_json) as dec:
        assert await r.rebuild_deadlines(0.0)
    assert dec.call_count == 0  # no record is read: 293 of them hold no deadline
    assert (r.last_entries_read, r.last_deadline_scan) == (7, (0, 0))
    assert not r.deadlines.stale
    due = T0 + timedelta(seconds=TTL)
    assert r.deadlines.pop_due(due - timedelta(microseconds=1)) == []
    assert sorted(key for key, _ in r.deadlines.pop_due(due)) == sorted(f"p{i}" for i in range(7))


async def test_a_partition_written_before_index_entries_is_read_once_and_indexed() -> None:
    table, _ = await _stored(keys=300, reserved=7)
    for key in [k for k in table if k.startswith("\x00deadline")]:  # as an older version wrote
        del table[key]  # (the flag too)
    r = _fresh(table)
    codec = Record.codec(r.process.state_type)
    with mock.patch.object(codec, "model_validate_json", wraps=codec.model_validate_json) as dec:
        assert await r.rebuild_deadlines(0.0)
    assert dec.call_count == 7
    assert r.last_deadline_scan == (300, 7) and r.last_entries_read == 7
    assert indexed_key(0) in table
    again = _fresh(table)  # the next rebuild reads the entries only
    assert await again.rebuild_deadlines(0.0)
    assert (again.last_entries_read, again.last_deadline_scan) == (7, (0, 0))
    assert not r.deadlines.stale
    due = T0 + timedelta(seconds=TTL)
    assert r.deadlines.pop_due(due - timedelta(microseconds=1)) == []
    assert sorted(key for key, _ in r.deadlines.pop_due(due)) == sorted(f"p{i}" for i in range(7))


async def test_a_rebuild_lets_other_tasks_run_every_few_hundred_keys() -> None:
    table, _ = await _stored(keys=10 * YIELD_EVERY, reserved=3)
    r = _fresh(table)
    for key in [k for k in table if k.startswith("\x00deadline")]:  # as an older version wrote
        del table[key]  # (the flag too)
    during = await _turns_of_other_tasks(r.rebuild_deadlines(0.0))
    assert during >= 9
    assert len(r.deadlines) == 3


async def test_a_key_stored_while_the_rebuild_scans_keeps_the_deadline_its_batch_scheduled() -> (
    None
):
    index = DeadlineIndex()
    old, new = T0, T0 + timedelta(minutes=5)
    # What the scan reads was read before the batches below stored their keys (a RocksDB
    # iterator's snapshot): "moved" and "cleared" come last, with their older deadline.
    filler: list[tuple[str, datetime | None]] = [(f"k{i}", None) for i in range(YIELD_EVERY)]
    snapshot = [*filler, ("moved", old), ("cleared", old), ("kept", old)]

    async def batch_stored_meanwhile() -> None:
        index.schedule("moved", new)
        index.schedule("cleared", None)

    meanwhile = asyncio.create_task(batch_stored_meanwhile())
    assert await index.rebuild(iter(snapshot), 0.0)
    await meanwhile
    assert index.pop_due(old) == [("kept", old)]
    assert index.pop_due(new) == [("moved", new)]


async def test_a_rebalance_during_a_rebuild_leaves_the_index_stale_until_rebuilt_again() -> None:
    index = DeadlineIndex()
    snapshot: list[tuple[str, datetime | None]] = [(f"k{i}", T0) for i in range(3 * YIELD_EVERY)]

    async def rebalance() -> None:
        index.stale = True  # what on_rebalance_complete does

    meanwhile = asyncio.create_task(rebalance())
    assert not await index.rebuild(iter(snapshot), 0.0)
    await meanwhile
    assert index.stale and index.needs_rebuild(1.0)
    rebalancing = True
    assert not await index.rebuild(iter(snapshot), 0.0, interrupted=lambda: rebalancing)
    assert index.stale
    assert await index.rebuild(iter(snapshot), 0.0)
    assert len(index) == 3 * YIELD_EVERY and not index.needs_rebuild(1e9)


async def test_a_deadline_scheduled_by_a_stored_batch_fires_without_any_rescan() -> None:
    table = DictTable()
    r = runner(FakeKafka(), table)
    r.deadlines = DeadlineIndex(rescan_every_s=0)  # SAGALINE_DEADLINE_RESCAN_S=0: never
    assert await r.rebuild_deadlines(0.0)  # at start: an empty table
    await r.handle_batch(
        [
            incoming(lc.SetCapacity(on_hand=5), "p1", 0),
            incoming(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=TTL), "p1", 1),
        ]
    )
    assert not r.deadlines.needs_rebuild(1e9)
    due = T0 + timedelta(seconds=TTL)
    assert r.deadlines.pop_due(due) == [("p1", due)]


async def test_the_periodic_rescan_is_a_setting_zero_meaning_never() -> None:
    assert Settings.model_fields["deadline_rescan_s"].default == 600.0
    assert Settings(deadline_rescan_s=0).deadline_rescan_s == 0
    index = DeadlineIndex(rescan_every_s=600)
    assert await index.rebuild([], monotonic_now=0.0)
    assert not index.needs_rebuild(599.0) and index.needs_rebuild(601.0)
    never = DeadlineIndex(rescan_every_s=0)
    assert await never.rebuild([], monotonic_now=0.0)
    assert not never.needs_rebuild(1e9)


class _Producer:
    """Queues ticks; the delivery of those to ``undelivered`` keys fails, and sending
    raises once ``refuse_after`` ticks were queued."""

    def __init__(self, undelivered: set[bytes], refuse_after: int = 1_000) -> None:
        self.undelivered = undelivered
        self.refuse_after = refuse_after
        self.sent: list[bytes] = []

    async def send(self, topic: str, key: bytes, value: bytes, *rest: Any) -> Any:
        if len(self.sent) == self.refuse_after:
            raise ConnectionError("broker went away")
        self.sent.append(key)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if key in self.undelivered:
            future.set_exception(ConnectionError("not delivered"))
        else:
            future.set_result(None)
        return future


async def test_a_key_whose_tick_was_not_delivered_is_due_again() -> None:
    r = runner(FakeKafka(), DictTable())
    for key in ("a", "b", "c"):
        r.deadlines.schedule(key, T0)
    app = SimpleNamespace(producer=_Producer(undelivered={b"b"}))
    await faust_app._send_ticks(app, "t.inventory", r)  # type: ignore[arg-type]
    assert r.deadlines.pop_due(T0) == [("b", T0)]


async def test_keys_whose_tick_could_not_be_sent_are_due_again() -> None:
    r = runner(FakeKafka(), DictTable())
    for key in ("a", "b", "c"):
        r.deadlines.schedule(key, T0)
    app = SimpleNamespace(producer=_Producer(undelivered=set(), refuse_after=1))
    with pytest.raises(ConnectionError):
        await faust_app._send_ticks(app, "t.inventory", r)  # type: ignore[arg-type]
    assert sorted(r.deadlines.pop_due(T0)) == [("b", T0), ("c", T0)]


async def test_a_rebuild_yields_after_a_few_milliseconds_whatever_its_slice_holds() -> None:
    index = DeadlineIndex()

    def slow_entries() -> Iterator[tuple[str, datetime | None]]:
        for i in range(20):  # far fewer keys than a slice: each costs as a big decode would
            time.sleep(2 * SLICE_S)
            yield f"k{i}", T0

    completed = False

    async def rebuild() -> None:
        nonlocal completed
        completed = await index.rebuild(slow_entries(), 0.0)

    during = await _turns_of_other_tasks(rebuild())
    assert completed
    assert during >= 19
    assert len(index) == 20


async def _turns_of_other_tasks(work: Awaitable[object]) -> int:
    """How many times another task (a stream of batches) ran while ``work`` was awaited."""
    turns = 0

    async def batches() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(batches())
    await asyncio.sleep(0)
    before = turns
    try:
        await work
    finally:
        other.cancel()
    return turns - before


# --- the index in the table: a rebuild reads the live work (issue 25) ------------------------


def _runner_at(table: DictTable, clock: list[datetime], horizon: timedelta) -> ProcessRunner:
    r = dataclasses.replace(runner(FakeKafka(), table), clock=lambda: clock[0])
    r.deadlines = DeadlineIndex(horizon=horizon)
    return r


async def test_finished_sagas_and_markers_are_not_read_by_a_rebuild() -> None:
    """A thousand finished orders within their retention hold a deadline each (their
    retirement, an hour away): a rebuild reads none of their entries, nor their records."""
    clock = [T0]
    table = DictTable()
    orders = dataclasses.replace(
        order_runner(table, clock),
        retirement=Retirement(record=timedelta(hours=1), marker=timedelta(days=1)),
    )
    orders.deadlines = DeadlineIndex(horizon=timedelta(minutes=1))
    assert await orders.rebuild_deadlines(0.0)
    batch = [order_message(oc.CancelOrder(), n, key=f"o{n}") for n in range(1000)]
    await orders.handle_batch(batch)
    assert len(orders.deadlines) == 0  # an hour away: left to the table's entries
    fresh = dataclasses.replace(orders)
    fresh.deadlines = DeadlineIndex(horizon=timedelta(minutes=1))
    assert await fresh.rebuild_deadlines(0.0)
    assert (fresh.last_entries_read, fresh.last_deadline_scan) == (0, (0, 0))
    # within the horizon of their retirement, an extension reads them (and nothing else)
    clock[0] = T0 + timedelta(minutes=59, seconds=40)
    assert fresh.deadlines.needs_extension(clock[0])
    assert await fresh.extend_deadlines()
    assert fresh.last_entries_read == 1000 and len(fresh.deadlines) == 1000


async def test_a_deadline_beyond_the_horizon_fires_once_an_extension_reads_it() -> None:
    clock = [T0]
    table = DictTable()
    r = _runner_at(table, clock, timedelta(minutes=1))
    assert await r.rebuild_deadlines(0.0)
    await r.handle_batch(
        [
            incoming(lc.SetCapacity(on_hand=5), "p1", 0),
            incoming(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=300), "p1", 1),
        ]
    )
    due = T0 + timedelta(seconds=300)
    assert len(r.deadlines) == 0 and not r.deadlines.needs_extension(clock[0])
    clock[0] = due - timedelta(seconds=40)
    assert r.deadlines.needs_extension(clock[0])
    assert await r.extend_deadlines()
    assert r.deadlines.pop_due(due) == [("p1", due)]


async def test_every_cut_of_a_keys_writes_leaves_its_stored_deadline_indexed() -> None:
    table = CutTable()
    r = runner(FakeKafka(), table)
    steps = [
        [incoming(lc.SetCapacity(on_hand=9), "p1", 0)],
        [incoming(lc.Reserve(reservation_id="a:p1", quantity=1, ttl_seconds=60), "p1", 1)],
        [incoming(lc.Reserve(reservation_id="b:p1", quantity=1, ttl_seconds=30), "p1", 2)],
        [incoming(lc.Confirm(reservation_id="b:p1"), "p1", 3)],
        [incoming(lc.Confirm(reservation_id="a:p1"), "p1", 4)],
    ]
    for batch in steps:
        await r.handle_batch(batch)
    codec = Record.codec(r.process.state_type)
    for before, writes in table.history:
        for cut in range(len(writes) + 1):
            partial = dict(before)
            apply(partial, writes[:cut])
            if "p1" not in partial:
                continue
            due = codec.decode("p1", partial["p1"], partial.get).next_deadline()
            entries = {k for k in partial if k.startswith("\x00deadline/")}
            if due is not None:
                assert entry_key("p1", due) in entries
    assert [k for k in table if k.startswith("\x00deadline/")] == []  # nothing is left over


async def test_a_left_over_entry_is_deleted_once_its_tick_is_processed() -> None:
    table = DictTable()
    r = runner(FakeKafka(), table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=5), "p1", 0)])
    early = T0 - timedelta(seconds=5)
    # what a crash between a record and its old entry's deletion leaves
    await table.write([StateWrite(entry_key("p1", early), b"", 0)], {})
    fresh = _fresh(table)
    assert await fresh.rebuild_deadlines(0.0)
    assert fresh.deadlines.pop_due(T0) == [("p1", early)]
    await fresh.handle_batch([incoming(Tick(), "p1", 1)])  # fires nothing, deletes the entry
    assert entry_key("p1", early) not in table


async def test_ticks_keep_flowing_from_the_old_index_while_a_rebuild_reads() -> None:
    index = DeadlineIndex()
    index.schedule("due", T0)
    popped: list[list[tuple[str, datetime]]] = []

    def slow_entries() -> Iterator[tuple[str, datetime | None]]:
        for i in range(5):
            time.sleep(2 * SLICE_S)
            yield f"k{i}", T0 + timedelta(hours=1)

    async def timer() -> None:
        await asyncio.sleep(0)
        popped.append(index.pop_due(T0))

    ticking = asyncio.create_task(timer())
    assert await index.rebuild(slow_entries(), 0.0)
    await ticking
    assert popped == [[("due", T0)]]  # served by the old index during the rebuild
    assert len(index) == 5
