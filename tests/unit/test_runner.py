"""The agent body without Kafka: batches, dead letters, send-before-store, the deadline index."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from runtime.settings import Settings
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.contracts.system import Tick
from sagas.definitions.order_saga import OrderSaga, OrderState
from sagas.machinery.history import is_chunk_key
from sagas.machinery.record import Record
from sagas.machinery.retirement import Retirement
from sagas.messages import Envelope
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway
from services.worker.deadletter import DeadLetter
from services.worker.deadlines import DeadlineIndex, entry_key, indexed_key
from services.worker.faust_app import create_app
from services.worker.metrics import Metrics
from services.worker.runner import MAX_STATE_BYTES, DictTable, Incoming, ProcessRunner
from tests.unit.helpers import ledger_record

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class FakeKafka:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.fail = fail

    async def send(self, topic: str, key: bytes, value: bytes) -> Any:
        self.sent.append((topic, key, value))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail:
            future.set_exception(ConnectionError("broker went away"))
        else:
            future.set_result(None)
        return future


def runner(kafka: FakeKafka, table: DictTable) -> ProcessRunner:
    return ProcessRunner(
        process=CapacityLedger(name="inventory", entity_type="product"),
        table=table,
        send=kafka.send,
        topic_for=lambda channel: f"t.{channel}",
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: T0,
    )


def incoming(message: Any, key: str, offset: int, message_id: str | None = None) -> Incoming:
    rec: Incoming = ledger_record(message, key, offset, message_id, occurred_at=T0)
    return rec


async def test_a_batch_decides_each_record_on_the_state_left_by_the_one_before() -> None:
    kafka, table = FakeKafka(), DictTable()
    batch = [
        incoming(lc.SetCapacity(on_hand=1), "p1", 0),
        incoming(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60), "p1", 1),
        incoming(lc.Reserve(reservation_id="o2:p1", quantity=1, ttl_seconds=60), "p1", 2),
    ]
    await runner(kafka, table).handle_batch(batch)
    replies = [Envelope.decode(v).type for t, _, v in kafka.sent if t == "t.order-saga"]
    assert replies == ["ledger.CapacitySet", "ledger.Reserved", "ledger.ReservationRejected"]
    assert set(table) == {"p1", entry_key("p1", T0 + timedelta(seconds=60))}


async def test_poison_records_are_dead_lettered_and_the_rest_of_the_batch_goes_on() -> None:
    kafka, table = FakeKafka(), DictTable()
    poison = Incoming("t.inventory", 0, 0, b"p1", b"{not json")
    await runner(kafka, table).handle_batch([poison, incoming(lc.SetCapacity(on_hand=3), "p1", 1)])
    [letter] = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert (letter["offset"], letter["stage"]) == (0, "inventory")
    assert str(letter["reason"]).startswith("not JSON")
    assert "p1" in table


async def test_nothing_is_stored_when_the_outputs_were_not_acknowledged() -> None:
    table = DictTable()
    with pytest.raises(ConnectionError):
        await runner(FakeKafka(fail=True), table).handle_batch(
            [incoming(lc.SetCapacity(on_hand=3), "p1", 0)]
        )
    assert table == {}  # a replay will decide again, on the old state, with the same ids


async def test_a_redelivered_record_after_the_store_changes_nothing() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    record = incoming(lc.SetCapacity(on_hand=3), "p1", 0)
    await r.handle_batch([record])
    stored, sent = dict(table), len(kafka.sent)
    # The same record again (a replay after a crash): its offset is behind the position.
    await r.handle_batch([record])
    # The same message at a new offset (a producer's retry): its id is in the dedupe window.
    copy = incoming(lc.SetCapacity(on_hand=3), "p1", 1, message_id="m0")
    await r.handle_batch([copy])
    assert (dict(table), len(kafka.sent)) == (stored, sent)
    assert r.metrics.snapshot()["inventory.duplicates"] == 1
    assert r.metrics.snapshot()["inventory.skipped_replayed"] == 1


def test_deadline_index_pops_each_key_once_in_time_order_and_forgets_cleared_ones() -> None:
    index = DeadlineIndex()
    index.schedule("a", T0 + timedelta(seconds=3))
    index.schedule("b", T0 + timedelta(seconds=1))
    index.schedule("c", T0 + timedelta(seconds=2))
    index.schedule("c", None)  # cleared before it was due
    index.schedule("a", T0 + timedelta(seconds=3))  # same deadline again: no second entry
    assert index.pop_due(T0 + timedelta(seconds=5)) == [
        ("b", T0 + timedelta(seconds=1)),
        ("a", T0 + timedelta(seconds=3)),
    ]
    assert index.pop_due(T0 + timedelta(seconds=9)) == []


async def test_deadline_index_is_rebuilt_after_a_rebalance_and_periodically() -> None:
    index = DeadlineIndex(rescan_every_s=60)
    assert index.needs_rebuild(0.0)
    assert await index.rebuild([("a", T0), ("b", None)], monotonic_now=0.0)
    assert len(index) == 1 and not index.needs_rebuild(30.0)
    assert index.needs_rebuild(61.0)
    index.stale = True  # what a rebalance does
    assert index.needs_rebuild(31.0)


async def test_an_exception_inside_a_definition_is_dead_lettered_with_its_error() -> None:
    class Broken(CapacityLedger):
        def decide(self, state: Any, message: Any, ctx: Any) -> Any:
            raise ZeroDivisionError("a bug in a saga definition")

    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    r.process = Broken(name="inventory", entity_type="product")
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=3), "p1", 0)])
    [letter] = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert letter["reason"] == "ZeroDivisionError: a bug in a saga definition"
    assert r.metrics.snapshot()["inventory.errors"] == 1
    assert table == {}


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "record has no key (envelope key 'p1')"),
        (b"p2", "record key 'p2' differs from envelope key 'p1'"),
        (b"\xff", "record key '\ufffd' differs from envelope key 'p1'"),
    ],
)
async def test_a_record_without_its_envelopes_key_is_dead_lettered(
    key: bytes | None, reason: str
) -> None:
    kafka, table = FakeKafka(), DictTable()
    good = incoming(lc.SetCapacity(on_hand=3), "p1", 0)
    r = runner(kafka, table)
    await r.handle_batch([Incoming(good.topic, 0, 0, key, good.value)])
    [letter] = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert letter["reason"] == reason
    assert r.metrics.snapshot()["inventory.invalid"] == 1
    assert table == {}


async def test_a_megabyte_record_gives_a_letter_that_fits() -> None:
    kafka, table = FakeKafka(), DictTable()
    huge = Incoming("t.inventory", 2, 9, b"p1", b"[" * 1_000_000)
    await runner(kafka, table).handle_batch([huge])
    [(topic, key, value)] = kafka.sent
    assert topic == "t.deadletter" and key == b"p1" and len(value) < 2_000
    letter = DeadLetter.decode(value)
    assert (letter["partition"], letter["offset"], letter["value_inline"]) == (2, 9, False)
    assert str(letter["reason"]).startswith("record of 1000000 bytes is larger")


class RecordingTable(DictTable):
    """A DictTable that keeps every write it was asked for, as the changelog would see it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[list[str], dict[tuple[str, int], int]]] = []

    async def write(self, states: Any, positions: Any) -> None:
        self.writes.append(([s.key for s in states], dict(positions)))
        await super().write(states, positions)


async def test_a_key_decided_several_times_in_a_batch_is_written_once_with_its_last_state() -> None:
    table = RecordingTable()
    r = runner(FakeKafka(), table)
    batch = [
        incoming(lc.SetCapacity(on_hand=10), "p1", 0),
        incoming(lc.Reserve(reservation_id="o1:p1", quantity=2, ttl_seconds=60), "p1", 1),
        incoming(lc.Reserve(reservation_id="o2:p2", quantity=1, ttl_seconds=60), "p2", 2),
        incoming(lc.Reserve(reservation_id="o3:p1", quantity=3, ttl_seconds=60), "p1", 3),
        incoming(lc.Confirm(reservation_id="o1:p1"), "p1", 4),
    ]
    await r.handle_batch(batch)
    # One write for the batch: each key once (four decisions on p1, one on p2), and the
    # input position once per partition, stored after the states it covers; p1's deadline
    # index entry comes before it (services/worker/deadlines.py).
    p1_due = entry_key("p1", T0 + timedelta(seconds=60))
    assert table.writes == [([p1_due, "p1", "p2"], {("t.inventory", 0): 5})]
    p1 = r._codec.decode("p1", table["p1"], table.get).state
    assert (p1.on_hand, p1.reserved, list(p1.holds), list(p1.closed)) == (
        8,
        3,
        ["o3:p1"],
        ["o1:p1"],
    )


async def test_a_batch_counts_how_long_its_records_were_in_transit() -> None:
    r = runner(FakeKafka(), DictTable())
    sent = time.time() - 0.5
    record = dataclasses.replace(incoming(lc.SetCapacity(on_hand=1), "p1", 0), timestamp=sent)
    untimed = incoming(lc.SetCapacity(on_hand=1), "p2", 1)
    await r.handle_batch([record, untimed])
    counters = r.metrics.snapshot()
    assert counters["inventory.transit_records"] == 1
    assert 0.5 <= counters["inventory.transit_s"] < 5


def reserve_and_confirm(n: int, key: str = "p1") -> list[Incoming]:
    rid = f"o{n}:{key}"
    return [
        incoming(lc.Reserve(reservation_id=rid, quantity=1, ttl_seconds=60), key, 2 * n + 1),
        incoming(lc.Confirm(reservation_id=rid), key, 2 * n + 2),
    ]


async def test_a_hot_keys_history_goes_to_chunks_and_its_record_stays_small() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=10**6), "p1", 0)])
    sizes = []
    for start in range(0, 400, 20):  # 400 sales, 20 a batch
        await r.handle_batch([m for n in range(start, start + 20) for m in reserve_and_confirm(n)])
        sizes.append(len(table["p1"]))
    chunks = sorted(k for k in table if is_chunk_key(k))
    assert chunks and all(k.startswith("p1\x1f") for k in chunks)
    assert max(sizes) < 6_000  # tails only: 400 closed and 500 ids were ~45 KB inline
    r.states.clear()  # read from the table, as after a restart
    restored = r.load("p1", 0)
    assert restored is not None
    assert len(restored.seen) == 500 and len(restored.state.closed) == 400
    assert restored.state.closed["o0:p1"].outcome == "confirmed"


async def test_a_key_whose_chunk_is_missing_is_dead_lettered_and_the_others_go_on() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=10**6), "p1", 0)])
    await r.handle_batch([m for n in range(40) for m in reserve_and_confirm(n)])
    del table[min(k for k in table if is_chunk_key(k))]
    r.states.clear()
    kafka.sent.clear()
    await r.handle_batch([*reserve_and_confirm(40), incoming(lc.SetCapacity(on_hand=2), "p2", 83)])
    letters = [json.loads(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert len(letters) == 2
    assert all("chunk 0 is missing from the table" in letter["reason"] for letter in letters)
    assert "p2" in table  # the rest of the batch was decided and stored


async def test_the_deadline_scan_skips_chunks_and_reads_chunked_records() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = runner(kafka, table)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=10**6), "p1", 0)])
    await r.handle_batch([m for n in range(40) for m in reserve_and_confirm(n)])
    await r.handle_batch(
        [incoming(lc.Reserve(reservation_id="late:p1", quantity=1, ttl_seconds=60), "p1", 81)]
    )
    assert any(is_chunk_key(k) for k in table)
    await r.rebuild_deadlines(time.monotonic())
    assert r.last_entries_read == 1  # p1's entry: no record is read
    table.pop(indexed_key(0))  # as if written before entries: the records are read once
    await r.rebuild_deadlines(time.monotonic())
    assert r.last_deadline_scan == (1, 1)  # p1 only, decoded without its chunks
    assert [key for key, _ in r.deadlines.pop_due(T0 + timedelta(minutes=2))] == ["p1"]


def reserve(n: int, key: str = "p1") -> Incoming:
    return incoming(lc.Reserve(reservation_id=f"o{n}:{key}", quantity=1, ttl_seconds=60), key, n)


async def test_decisions_whose_state_is_too_large_are_dead_lettered_and_the_stream_goes_on() -> (
    None
):
    # 650 bytes lets p1's record hold two holds (~576 bytes), not three (~726).
    kafka, table = FakeKafka(), RecordingTable()
    r = dataclasses.replace(runner(kafka, table), max_state_bytes=650)
    batch = [
        incoming(lc.SetCapacity(on_hand=10), "p1", 0),
        reserve(1),
        reserve(2),
        reserve(3),  # a third hold: too large
        reserve(4),  # decided on the state before o3: too large as well
        incoming(lc.Confirm(reservation_id="o1:p1"), "p1", 5),
        incoming(lc.SetCapacity(on_hand=5), "p2", 6),
    ]
    await r.handle_batch(batch)
    letters = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert [letter["offset"] for letter in letters] == [3, 4]
    assert "would be a 726-byte changelog record ('p1'), over the 650-byte limit" in str(
        letters[0]["reason"]
    )
    replies = [Envelope.decode(v) for t, _, v in kafka.sent if t == "t.order-saga"]
    assert [(e.type, e.saga_id) for e in replies] == [
        ("ledger.CapacitySet", "o0"),
        ("ledger.Reserved", "o1"),
        ("ledger.Reserved", "o2"),
        ("ledger.Confirmed", "o5"),  # the Confirm of o1, sent as record 5 (`incoming`)
        ("ledger.CapacitySet", "o6"),
    ]
    p1 = r._codec.decode("p1", table["p1"], table.get).state
    assert (list(p1.holds), list(p1.closed)) == (["o2:p1"], ["o1:p1"])
    # Stored with the batch's position past every record: nothing is retried.
    p1_due = entry_key("p1", T0 + timedelta(seconds=60))
    assert table.writes == [([p1_due, "p1", "p2"], {("t.inventory", 0): 7})]
    assert all(len(k) + len(v) <= 650 for k, v in table.items())
    assert r.metrics.snapshot()["inventory.state_too_large"] == 2


async def test_a_state_too_large_in_the_middle_of_a_batch_is_never_stored_so_it_is_fine() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = dataclasses.replace(runner(kafka, table), max_state_bytes=650)
    confirm = incoming(lc.Confirm(reservation_id="o1:p1"), "p1", 4)
    await r.handle_batch(
        [incoming(lc.SetCapacity(on_hand=10), "p1", 0), reserve(1), reserve(2), reserve(3), confirm]
    )
    assert "t.deadletter" not in {t for t, _, _ in kafka.sent}
    p1 = r._codec.decode("p1", table["p1"], table.get).state
    assert list(p1.holds) == ["o2:p1", "o3:p1"]


async def test_a_state_too_large_in_a_later_batch_leaves_the_stored_state_as_it_was() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = dataclasses.replace(runner(kafka, table), max_state_bytes=650)
    await r.handle_batch([incoming(lc.SetCapacity(on_hand=10), "p1", 0), reserve(1), reserve(2)])
    before = table["p1"]
    kafka.sent.clear()
    await r.handle_batch([reserve(3)])
    assert [t for t, _, _ in kafka.sent] == ["t.deadletter"]
    assert table["p1"] == before
    assert table.positions == {("t.inventory", 0): 4}
    await r.handle_batch([incoming(lc.Confirm(reservation_id="o2:p1"), "p1", 4)])
    assert Envelope.decode(kafka.sent[-1][2]).type == "ledger.Confirmed"


def test_the_state_limit_fits_the_workers_producer_request_size(tmp_path: Path) -> None:
    # aiokafka refuses a record whose framed size is over the producer's max request size
    # (Faust's setting): a state at the runner's limit must pass it.
    app, _ = create_app(Settings(data_dir=tmp_path, store="memory"), [])
    key = b"k" * 200
    value = b"v" * (MAX_STATE_BYTES - len(key))
    framed = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [])
    assert framed <= app.conf.producer_max_request_size == 1_000_000


# --- retirement through the runner (sagas/machinery/retirement.py) --------------------------


class CutTable(DictTable):
    """A DictTable that keeps, per write, the table before it and the writes in order."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[dict[str, bytes], list[tuple[str, bytes | None]]]] = []

    async def write(self, states: Any, positions: Any) -> None:
        self.history.append((dict(self), [(s.key, s.value) for s in states]))
        await super().write(states, positions)


def order_runner(table: DictTable, clock: list[datetime]) -> ProcessRunner:
    return ProcessRunner(
        process=OrderSaga(),
        table=table,
        send=FakeKafka().send,
        topic_for=lambda channel: f"t.{channel}",
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: clock[0],
        retirement=Retirement(record=timedelta(minutes=1), marker=timedelta(minutes=5)),
    )


def order_message(
    message: Any, offset: int, message_id: str | None = None, key: str = "o1"
) -> Incoming:
    env = Envelope.wrap(
        message,
        message_id=message_id or f"m{offset}",
        key=key,
        saga_id=key,
        occurred_at=T0,
    )
    return Incoming("t.order-saga", 0, offset, key.encode(), env.encode())


def place_order() -> oc.PlaceOrder:
    line = oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal(1))
    return oc.PlaceOrder(customer_id="c", lines=(line,), payment=oc.PaymentDetails(method="x"))


async def test_a_saga_retires_and_is_deleted_with_its_chunks_and_every_cut_is_retired_or_not() -> (
    None
):
    clock = [T0]
    table = CutTable()
    r = order_runner(table, clock)
    await r.handle_batch([order_message(place_order(), 0, message_id="place")])
    # cancelled, then refused cancels: its seen ids fill chunks
    await r.handle_batch([order_message(oc.CancelOrder(), n) for n in range(1, 80)])
    assert any(is_chunk_key(k) for k in table)
    assert r.deadlines.pop_due(T0 + timedelta(minutes=1)) == [("o1", T0 + timedelta(minutes=1))]
    clock[0] = T0 + timedelta(minutes=1)
    await r.handle_batch([order_message(Tick(), 80)])
    marker = r.load("o1", 0)
    assert marker is not None and marker.retired_at == clock[0]
    assert len(table["o1"]) < 400
    # a redelivered PlaceOrder, and another for the same id: dropped, nothing stored
    writes = len(table.history)
    await r.handle_batch([order_message(place_order(), 81, message_id="place")])
    await r.handle_batch([order_message(place_order(), 82)])
    assert [w for _, w in table.history[writes:]] == [[], []]  # positions only
    assert r.metrics.snapshot()["order-saga.retired_dropped"] == 2
    clock[0] += timedelta(minutes=5)
    await r.handle_batch([order_message(Tick(), 83)])
    assert list(table) == []  # the key, its chunks: all gone
    assert r.load("o1", 0) is None and len(r.deadlines) == 0
    # every write of the run, cut after any of its writes: "o1" is what it was before the
    # write or what it is after (absent, once deleted), and every chunk it reads is there
    for before, writes_of_batch in table.history:
        after = dict(before)
        apply(after, writes_of_batch)
        ends = {state(before), state(after)}
        for cut in range(len(writes_of_batch) + 1):
            partial = dict(before)
            apply(partial, writes_of_batch[:cut])
            assert state(partial) in ends


def apply(table: dict[str, bytes], writes: list[tuple[str, bytes | None]]) -> None:
    for key, value in writes:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


def state(table: dict[str, bytes]) -> bytes | None:
    """The order's record as a reader decodes it (its chunks loaded), None when absent."""
    if "o1" not in table:
        return None
    return Record.codec(OrderState).decode("o1", table["o1"], table.get).model_dump_json().encode()


async def test_a_stray_reply_for_an_unknown_saga_leaves_no_key() -> None:
    table = CutTable()
    r = order_runner(table, [T0])
    reply = lc.Reserved(on_hand=1, reserved=1, reservation_id="o1:p1", quantity=1, expires_at="x")
    await r.handle_batch([order_message(reply, 0)])
    assert list(table) == [] and table.positions == {("t.order-saga", 0): 1}
    assert r.metrics.snapshot()["order-saga.unchanged"] == 1


async def test_a_refusal_to_an_unknown_key_is_sent_and_nothing_is_stored() -> None:
    kafka, table = FakeKafka(), DictTable()
    r = dataclasses.replace(runner(kafka, table), process=PaymentGateway())
    env = Envelope.wrap(
        pc.Capture(), message_id="m0", key="o1", saga_id="o1", reply_to="order-saga", occurred_at=T0
    )
    await r.handle_batch([Incoming("t.payment", 0, 0, b"o1", env.encode())])
    assert [Envelope.decode(v).type for _, _, v in kafka.sent] == [pc.CaptureRefused.TYPE]
    assert list(table) == [] and table.positions == {("t.payment", 0): 1}
