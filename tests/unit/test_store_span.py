"""States stored once for the batches of a span (ProcessRunner.store_every_s): outputs still
go batch by batch, what is pending is never seen by the table before it is stored whole,
and a crash or a rebalance processes the span again into the very same messages."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from sagas.contracts import ledger as lc
from sagas.messages import Envelope
from sagas.participants.ledger import CapacityLedger
from services.worker.metrics import Metrics
from services.worker.positions import position_key
from services.worker.runner import DictTable, Incoming, Positions, ProcessRunner, StateWrite
from tests.unit.helpers import Clock, ledger_record

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOPIC = "t.inventory"


class Kafka:
    """Sends that are acknowledged at once (or refused), in the order they were made."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.refuse = False

    async def send(
        self,
        topic: str,
        key: bytes,
        value: bytes,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Any:
        self.sent.append((topic, key, value))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.refuse:
            future.set_exception(ConnectionError("broker went away"))
        else:
            future.set_result(None)
        return future


class Table(DictTable):
    """Counts writes, and fails them on demand (before anything is stored)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[list[StateWrite], dict[tuple[str, int], int]]] = []
        self.fail = False
        self.acknowledged = asyncio.Event()
        """Cleared: a write waits for its changelog's acknowledgements until it is set."""
        self.acknowledged.set()
        self.in_flight = 0

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        if self.fail:
            raise ConnectionError("changelog not acknowledged")
        self.in_flight += 1
        await self.acknowledged.wait()
        self.in_flight -= 1
        self.writes.append((list(states), dict(positions)))
        await super().write(states, positions)


def runner(
    kafka: Kafka,
    table: Table,
    clock: Clock,
    every_s: float = 1.0,
    seen_window: int = 500,
    seeks: list[tuple[str, int, int]] | None = None,
) -> ProcessRunner:
    async def seek(topic: str, partition: int, offset: int) -> None:
        if seeks is not None:
            seeks.append((topic, partition, offset))

    return ProcessRunner(
        process=CapacityLedger(name="inventory", entity_type="product"),
        table=table,
        send=kafka.send,
        topic_for=lambda channel: f"t.{channel}",
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: T0,
        monotonic=clock,
        store_every_s=every_s,
        seen_window=seen_window,
        seek=seek,
    )


def record(message: Any, key: str, offset: int) -> Incoming:
    rec: Incoming = ledger_record(message, key, offset, occurred_at=T0)
    return rec


def traffic() -> list[Incoming]:
    """Stock set, then reservations on two products, one record a batch."""
    first = [
        record(lc.SetCapacity(on_hand=2), "p1", 0),
        record(lc.SetCapacity(on_hand=1), "p2", 1),
    ]
    reserves = [
        record(lc.Reserve(reservation_id=f"o{n}:{key}", quantity=1, ttl_seconds=60), key, n)
        for n, key in enumerate(["p1", "p2", "p1", "p2"], start=2)
    ]
    return first + reserves


async def test_the_batches_of_a_span_send_one_by_one_and_store_once() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock)
    for rec in traffic():
        sent = len(kafka.sent)
        await r.handle_batch([rec])
        assert len(kafka.sent) > sent  # each batch's messages went before the next batch
    assert table.writes == [] and table == {}  # nothing stored within the span
    clock.now += 1.0
    late = lc.Reserve(reservation_id="o9:p1", quantity=1, ttl_seconds=60)
    await r.handle_batch([record(late, "p1", 6)])
    [(states, positions)] = table.writes
    assert positions == {(TOPIC, 0): 6}  # the span's last position, the new batch not in it
    assert sorted(w.key for w in states if not w.key.startswith("\x00")) == ["p1", "p2"]
    assert table.positions[(TOPIC, 0)] == 6


async def test_each_store_holds_what_storing_batch_by_batch_ends_with() -> None:
    one_by_one, spanned = Table(), Table()
    clock = Clock()
    r0 = runner(Kafka(), one_by_one, clock, every_s=0.0)
    r1 = runner(Kafka(), spanned, clock, every_s=1.0)
    for rec in traffic():
        await r0.handle_batch([rec])
        await r1.handle_batch([rec])
    clock.now += 1.0
    await r1._store_when_due()  # what the worker's task does once the span is due
    assert len(one_by_one.writes) == 6 and len(spanned.writes) == 1
    assert dict(spanned) == dict(one_by_one)
    assert spanned.positions == one_by_one.positions


async def test_a_span_is_stored_when_due_with_no_batch_to_come() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock, every_s=0.05)
    clock.now = asyncio.get_running_loop().time()
    r.monotonic = asyncio.get_running_loop().time
    await r.handle_batch([record(lc.SetCapacity(on_hand=2), "p1", 0)])
    assert table.writes == []
    await asyncio.sleep(0.2)
    assert len(table.writes) == 1 and "p1" in table


async def test_a_revocation_waits_for_a_store_in_flight_and_voids_what_is_pending() -> None:
    kafka, table = Kafka(), Table()
    r = runner(kafka, table, Clock(), every_s=0.05)
    r.monotonic = asyncio.get_running_loop().time
    await r.handle_batch([record(lc.SetCapacity(on_hand=2), "p1", 0)])
    table.acknowledged.clear()
    while not table.in_flight:  # the runner's task begins storing the span once it is due
        await asyncio.sleep(0.01)
    revoking = asyncio.create_task(r.revoked([0]))
    await asyncio.sleep(0.05)
    assert not revoking.done()  # the store in flight lands before the revocation goes on
    table.acknowledged.set()
    await revoking
    assert len(table.writes) == 1

    await r.handle_batch([record(lc.SetCapacity(on_hand=3), "p1", 1)])
    await r.revoked([0])
    await asyncio.sleep(0.2)  # long past due: nothing decided before the revocation is stored
    assert len(table.writes) == 1
    assert r.metrics.counts["inventory.pending_dropped"] == 1


async def test_a_stop_stores_what_is_pending_and_every_batch_after_it_at_once() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock, every_s=60.0)
    records = traffic()
    for rec in records[:3]:
        await r.handle_batch([rec])
    assert table.writes == []  # pending: far from due
    await r.stopping()
    [(_, positions)] = table.writes
    assert positions == {(TOPIC, 0): 3}  # the next offset to read: nothing left to decide again
    await r.handle_batch([records[3]])  # a batch between the signal and the agents' stop
    assert len(table.writes) == 2 and table.positions[(TOPIC, 0)] == 4
    await r.revoked([0])  # the revocation that follows finds nothing to void
    assert "inventory.pending_dropped" not in r.metrics.counts


async def test_a_crash_within_the_span_replays_into_the_same_messages() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock)
    records = traffic()
    for rec in records[:2]:
        await r.handle_batch([rec])
    clock.now += 1.0
    stored_ones = len(kafka.sent)
    for rec in records[2:]:
        await r.handle_batch([rec])  # the first stores the first two; these stay pending
    assert table.positions[(TOPIC, 0)] == 2
    pending_ones = kafka.sent[stored_ones:]
    # The process dies; a new one over the same table is given the partition from its
    # stored position on.
    again = Kafka()
    restarted = runner(again, table, Clock())
    for rec in records[2:]:
        await restarted.handle_batch([rec])
    assert again.sent == pending_ones  # byte for byte: consumers drop them by their ids


async def test_a_rebalance_drops_the_span_and_resumes_from_the_stored_position() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    seeks: list[tuple[str, int, int]] = []
    r = runner(kafka, table, clock, seeks=seeks)
    records = traffic()
    await r.handle_batch([records[0]])
    clock.now += 1.0
    await r.handle_batch([records[1]])  # stores the first: the position is 1
    await r.handle_batch([records[2]])
    r.states.drop_partitions([0])  # the partition is revoked (then assigned again)
    clock.now += 1.0
    await r.handle_batch([records[3]])
    assert table.positions[(TOPIC, 0)] == 1  # the span of offsets 1 and 2 was not stored
    assert r.metrics.counts["inventory.pending_dropped"] == 2
    assert seeks == [(TOPIC, 0, 1)]  # offset 3 was not processed: back to the stored one
    assert position_key(TOPIC, 0) not in table  # DictTable keeps positions apart
    await r.handle_batch(records[1:])  # the partition again from its stored position
    clock.now += 1.0
    await r.handle_batch([records[4]])  # stores those, then finds this one processed
    assert table.positions[(TOPIC, 0)] == 6


async def test_a_span_never_holds_more_records_than_a_key_remembers() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock, every_s=60.0, seen_window=10)
    sets = [record(lc.SetCapacity(on_hand=n), "p1", n) for n in range(12)]
    await r.handle_batch(sets[:6])
    assert table.writes == []
    await r.handle_batch(sets[6:])  # 12 records would not fit in a seen window of 10
    [(_, positions)] = table.writes
    assert positions == {(TOPIC, 0): 6}


async def test_a_failed_store_keeps_the_span_and_the_retry_stores_it_once() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock, every_s=0.0)
    rec = record(lc.SetCapacity(on_hand=2), "p1", 0)
    table.fail = True
    with pytest.raises(ConnectionError):
        await r.handle_batch([rec])
    sent = list(kafka.sent)
    assert sent and table == {}
    table.fail = False
    await r.handle_batch([rec])  # the agent's retry of the same batch
    assert kafka.sent == sent  # stored, then its record found processed: nothing resent
    assert len(table.writes) == 1 and table.positions[(TOPIC, 0)] == 1


async def test_outputs_not_acknowledged_leave_the_span_as_it_was() -> None:
    kafka, table, clock = Kafka(), Table(), Clock()
    r = runner(kafka, table, clock)
    await r.handle_batch([record(lc.SetCapacity(on_hand=2), "p1", 0)])
    kafka.refuse = True
    reserve = record(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60), "p1", 1)
    with pytest.raises(ConnectionError):
        await r.handle_batch([reserve])
    kafka.refuse = False
    await r.handle_batch([reserve])  # decided again, on the span's state before it
    clock.now += 1.0
    await r._store_when_due()
    replies = [Envelope.decode(v).type for t, _, v in kafka.sent if t == "t.order-saga"]
    assert replies == ["ledger.CapacitySet", "ledger.Reserved", "ledger.Reserved"]
    assert table.positions[(TOPIC, 0)] == 2
