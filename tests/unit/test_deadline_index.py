"""The deadline index without Kafka: what feeds it, what rebuilds it, and what a rebuild costs
(issue 11: a full rescan every minute decoded every record of every table on the loop)."""

from __future__ import annotations

import asyncio
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
from sagas.machinery.record import Record
from services.worker import faust_app
from services.worker.deadlines import SLICE_S, YIELD_EVERY, DeadlineIndex
from services.worker.runner import DictTable, ProcessRunner
from tests.unit.test_runner import T0, FakeKafka, incoming, runner

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


async def test_the_rebuild_on_stale_finds_every_deadline_and_decodes_only_those_records() -> None:
    table, _ = await _stored(keys=300, reserved=7)
    r = _fresh(table)
    assert r.deadlines.stale and r.deadlines.needs_rebuild(0.0)
    codec = Record.codec(r.process.state_type)
    with mock.patch.object(codec, "model_validate_json", wraps=codec.model_validate_json) as dec:
        assert await r.rebuild_deadlines(table.items(), 0.0)
    assert dec.call_count == 7
    assert r.last_deadline_scan == (300, 7)
    assert not r.deadlines.stale
    due = T0 + timedelta(seconds=TTL)
    assert r.deadlines.pop_due(due - timedelta(microseconds=1)) == []
    assert sorted(key for key, _ in r.deadlines.pop_due(due)) == sorted(f"p{i}" for i in range(7))


async def test_a_rebuild_lets_other_tasks_run_every_few_hundred_keys() -> None:
    table, _ = await _stored(keys=10 * YIELD_EVERY, reserved=3)
    r = _fresh(table)
    during = await _turns_of_other_tasks(r.rebuild_deadlines(table.items(), 0.0))
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
    assert await r.rebuild_deadlines(table.items(), 0.0)  # at start: an empty table
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
