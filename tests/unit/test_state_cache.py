"""The decoded-state cache: it serves only what the table holds, and forgets on rebalance."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from sagas.contracts import ledger as lc
from sagas.machinery.record import Record
from sagas.participants.ledger import CapacityLedger
from services.worker.metrics import Metrics
from services.worker.runner import DictTable, Incoming, Positions, ProcessRunner, StateWrite
from services.worker.state_cache import StateCache
from tests.unit.helpers import ledger_record

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class CountingTable(DictTable):
    """Counts reads; ``fail_after_store`` stores the states, then raises (a write that
    reached the store but whose changelog offset was never persisted)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.fail_after_store = False

    def load(self, key: str, partition: int) -> bytes | None:
        self.reads += 1
        return super().load(key, partition)

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        await super().write(states, positions)
        if self.fail_after_store:
            raise ConnectionError("changelog offset not persisted")


async def send(topic: str, key: bytes, value: bytes) -> Any:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def runner(table: DictTable, capacity: int = 100) -> ProcessRunner:
    return ProcessRunner(
        process=CapacityLedger(name="inventory", entity_type="product"),
        table=table,
        send=send,
        topic_for=lambda channel: f"t.{channel}",
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: T0,
        state_cache_keys=capacity,
    )


def incoming(message: Any, key: str, offset: int) -> Incoming:
    rec: Incoming = ledger_record(message, key, offset, occurred_at=T0)
    return rec


def reserve(offset: int) -> Incoming:
    message = lc.Reserve(reservation_id=f"o{offset}:p1", quantity=1, ttl_seconds=60)
    return incoming(message, "p1", offset)


async def test_a_stored_state_is_served_decoded_and_equal_to_the_table() -> None:
    table = CountingTable()
    r = runner(table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=5), "p1", 0)])
    await r.handle_batch([reserve(1)])
    await r.handle_batch([reserve(2)])
    assert table.reads == 1  # the first message found no state; after it, the cache
    cached = r.load("p1", 0)
    assert cached is not None
    assert cached.encode() == table["p1"]


async def test_a_failed_write_leaves_no_cached_state_behind() -> None:
    table = CountingTable()
    r = runner(table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=5), "p1", 0)])
    table.fail_after_store = True
    with pytest.raises(ConnectionError):
        await r.handle_batch([reserve(1)])
    assert len(r.states) == 0
    table.fail_after_store = False
    reads = table.reads
    loaded = r.load("p1", 0)
    assert table.reads == reads + 1  # read from the table again, not from memory
    assert loaded is not None and loaded.encode() == table["p1"]


async def test_a_rebalance_during_a_batch_keeps_its_states_out_of_the_cache() -> None:
    table = CountingTable()
    r = runner(table)
    write = table.write

    async def rebalance_meanwhile(states: Sequence[StateWrite], positions: Positions) -> None:
        r.states.clear()  # what the worker does when partitions are assigned again
        await write(states, positions)

    table.write = rebalance_meanwhile  # type: ignore[method-assign]
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=5), "p1", 0)])
    assert len(r.states) == 0
    assert "p1" in table


async def test_no_cache_with_capacity_zero() -> None:
    table = CountingTable()
    r = runner(table, capacity=0)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=5), "p1", 0)])
    await r.handle_batch([reserve(1)])
    await r.handle_batch([reserve(2)])
    assert (table.reads, len(r.states)) == (3, 0)


LEDGER = CapacityLedger(name="inventory", entity_type="product")


def record(n: int) -> Record[Any]:
    return Record.codec(LEDGER.state_type)(state=LEDGER.initial(f"p{n}"))


def test_revoked_partitions_are_dropped_and_others_kept() -> None:
    cache = StateCache(10)
    cache.put("a", 0, record(1), cache.generation)
    cache.put("b", 1, record(2), cache.generation)
    cache.drop_partitions([0])
    assert (cache.get("a", 0), cache.get("b", 1)) == (None, record(2))


def test_least_recently_used_keys_go_first_and_a_key_is_only_served_for_its_partition() -> None:
    cache = StateCache(2)
    cache.put("a", 0, record(1), 0)
    cache.put("b", 0, record(2), 0)
    assert cache.get("a", 0) == record(1)
    cache.put("c", 0, record(3), 0)
    assert (cache.get("a", 0), cache.get("b", 0), cache.get("c", 0)) == (record(1), None, record(3))
    assert cache.get("a", 1) is None


def test_a_put_from_before_a_rebalance_is_ignored() -> None:
    cache = StateCache(10)
    generation = cache.generation
    cache.clear()
    cache.put("a", 0, record(1), generation)
    assert len(cache) == 0
