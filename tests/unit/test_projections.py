"""Projection meanings and the projector's core, without Kafka.

The pure folds and listings; the triage of incoming records; ``apply_batch`` on an SQLite
file (no server): out-of-order, duplicated and unknown events; the waiters of the API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from readside import queries, store
from readside import triage as triage_module
from readside.batch import Applied, Batch, apply_batch
from readside.triage import Positioned, Rejected, triage, unknown_type_reason
from sagas.ids import external_command_id
from sagas.messages import Envelope
from sagas.projections.entity import fold_entity
from sagas.projections.listing import customer_history, saga_timeline
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK
from services.api.freshness import Arrived, ReadWatch
from services.projector.status import projection_status
from tests.integration.golden import T0, Expected, expected_rows, golden_events, scrambled
from tests.integration.readside import fresh_database, read_engine, snapshot

pytestmark = pytest.mark.unit
NOW = datetime(2024, 6, 1, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with fresh_database("sqlite", tmp_path) as url, read_engine(url) as engine:
        yield engine


def apply(engine: Engine, events: Sequence[Envelope], batch_size: int = 10_000) -> Applied:
    """Feed ``events`` as partition 0 of topic ``t``, ``batch_size`` at a time."""
    total = Applied()
    with engine.connect() as conn:
        start = sum(queries.checkpoints(conn, "t").values())
    for first in range(0, len(events), batch_size):
        chunk = events[first : first + batch_size]
        offsets = range(start + first, start + first + len(chunk))
        batch = Batch(
            "t",
            [Positioned(e, 0, o) for e, o in zip(chunk, offsets, strict=True)],
            {0: offsets[-1] + 1},
        )
        with engine.begin() as conn:
            done = apply_batch(conn, batch, NOW)
        total.applied += done.applied
        total.duplicates += done.duplicates
        total.receipts += done.receipts
        total.unknown.update(done.unknown)
        total.held = done.held
    return total


def stored(engine: Engine) -> Expected:
    """The read models as the API reads them, in the shape of :class:`Expected`."""
    with engine.connect() as conn:
        tables = snapshot(engine)
        orders = {row[0]: queries.get_row(conn, ORDERS, row[0]) for row in tables["orders"]}
        stock = {
            row[0]: queries.get_row(conn, PRODUCT_STOCK, row[0]) for row in tables["product_stock"]
        }
        sagas = {row[0] for row in tables["saga_timeline"]}
        timeline = {step for saga in sagas for step in queries.saga_timeline(conn, saga)}
    positions = dict(tables["entity_positions"])
    return Expected(
        {k: v for k, v in orders.items() if v},
        {k: v for k, v in stock.items() if v},
        timeline,
        positions,
    )


def unknown_event(key: str, sequence: int) -> Envelope:
    data = json.loads(golden_events(1, 1)[0].encode())
    data |= {"type": "order.Renamed", "key": key, "sequence": sequence, "message_id": "u1"}
    data["entity_type"] = key.split(":")[0]
    return Envelope.model_validate(data)


# --- pure folds and listings ----------------------------------------------------------------


def test_an_unknown_event_type_is_skipped_but_keeps_its_place_in_the_sequence() -> None:
    placed, pending = [e for e in golden_events(1, 1) if e.key == "order:o000"][:2]
    later = pending.model_copy(update={"sequence": 3})
    folded = fold_entity("order", None, [placed, unknown_event("order:o000", 2), later])
    assert folded.row is not None and folded.row.last_sequence == 3
    assert [e.type for e in folded.unknown] == ["order.Renamed"]
    assert len(folded.timeline) == 2


def test_an_order_reads_the_same_with_or_without_a_status_event_for_pending() -> None:
    # Streams written before OrderPlaced alone said PENDING carry a StatusChanged(PENDING)
    # right after it; new ones do not. Both give one row, and one timeline but for that step.
    old = [e for e in golden_events(1, 1) if e.key == "order:o000"]
    assert [e.type for e in old[:2]] == ["order.Placed", "order.StatusChanged"]
    assert old[1].message().status == "PENDING"  # type: ignore[attr-defined]
    new = [
        e.model_copy(update={"sequence": (e.sequence or 0) - 1 if e.sequence != 1 else 1})
        for e in (old[0], *old[2:])
    ]
    assert [e.sequence for e in new] == list(range(1, len(new) + 1))
    for upto in range(1, len(new) + 1):
        before = fold_entity("order", None, old[: upto + 1] if upto > 1 else old[:1]).row
        after = fold_entity("order", None, new[:upto]).row
        assert before is not None and after is not None
        assert after.model_copy(update={"last_sequence": 0}) == before.model_copy(
            update={"last_sequence": 0}
        )
    assert fold_entity("order", None, new[:1]).row.status == "PENDING"  # type: ignore[union-attr]
    old_steps = [t.summary for t in fold_entity("order", None, old).timeline]
    new_steps = [t.summary for t in fold_entity("order", None, new).timeline]
    assert old_steps[1] == "status PENDING"
    assert new_steps == old_steps[:1] + old_steps[2:]
    assert new_steps[0].endswith("; status PENDING")


def test_a_customer_history_lists_newest_first_and_ties_by_order_id() -> None:
    rows = list(expected_rows(golden_events(30)).orders.values())
    same_time = rows[0].model_copy(update={"order_id": "o999"})
    history = customer_history([*rows, same_time], rows[0].customer_id, limit=4)
    assert len(history) == 4
    assert all(h.customer_id == rows[0].customer_id for h in history)
    keys = [(h.created_at, h.order_id) for h in history]
    assert keys == sorted(keys, reverse=True)


def test_a_saga_timeline_lists_every_entity_s_steps_oldest_first() -> None:
    steps = saga_timeline(expected_rows(golden_events(3)).timeline, "o000")
    assert {s.entity_key for s in steps} == {"order:o000", "product:p0", "payment:o000"}
    assert steps[0].summary.startswith("order placed by c0")
    assert steps[-1].summary == "status CONFIRMED"
    assert [s.occurred_at for s in steps] == sorted(s.occurred_at for s in steps)


# --- triage ------------------------------------------------------------------------------------


STOCK_SET, PLACED = golden_events(1, 1)[:2]


def _raw(event: Envelope, **changes: object) -> bytes:
    data = json.loads(event.encode()) | changes
    return json.dumps({k: v for k, v in data.items() if v is not None}).encode()


def _placed(**payload: object) -> dict[str, object]:
    return {"payload": PLACED.payload | payload}


@pytest.mark.parametrize(
    ("event", "changes", "reason"),
    [
        (PLACED, {"sequence": None}, "not a domain event"),
        (PLACED, {"entity_type": "product"}, "does not name a 'product' entity"),
        (PLACED, {"key": "order:" + "x" * 70}, "orders.order_id holds 64 characters"),
        (PLACED, _placed(total="1e13"), "orders.total holds less than"),
        (
            PLACED,
            _placed(total="9" * 30),
            f"orders.total holds less than 1000000000000, got {'9' * 30}",
        ),
        (PLACED, _placed(total="1e400"), "orders.total holds less than 1000000000000, got 1E+400"),
        (PLACED, _placed(total="999999999999.995"), "orders.total holds less than"),
        (PLACED, _placed(total="NaN"), "total: Input should be a finite number"),
        (PLACED, {"payload": {"status": "LOST"}}, "order.Placed"),
        (PLACED, {"sequence": 2**40}, "sequence"),
        (PLACED, _placed(customer_id="c\x00"), "NUL character"),
        (PLACED, _placed(payment_method="\ud800"), "lone surrogate"),
        (PLACED, {"saga_id": "s\x00"}, "NUL character"),
        (PLACED, {"occurred_at": "9999-12-31T23:00:00-05:00"}, "no UTC equivalent"),
        (STOCK_SET, {"payload": {"on_hand": 2**40, "reserved": 0}}, "product_stock.on_hand"),
    ],
)
def test_malformed_or_unstorable_records_are_rejected_with_a_reason(
    event: Envelope, changes: dict[str, object], reason: str
) -> None:
    key = str(changes.get("key", event.key)).encode()
    sorted_out = triage(key, _raw(event, **changes))
    assert isinstance(sorted_out, Rejected)
    assert reason in sorted_out.reason


def test_a_saga_event_s_version_is_kept_and_one_beyond_the_column_is_rejected() -> None:
    versioned = triage(PLACED.key.encode(), _raw(PLACED, definition_version=2))
    assert isinstance(versioned, Envelope) and versioned.definition_version == 2
    too_big = triage(PLACED.key.encode(), _raw(PLACED, definition_version=2**40))
    assert isinstance(too_big, Rejected)
    assert (
        too_big.reason == f"does not fit the read model: orders.version is an INTEGER, got {2**40}"
    )
    # a participant's entity has no version column: its events' version is not checked
    assert isinstance(
        triage(STOCK_SET.key.encode(), _raw(STOCK_SET, definition_version=2**40)), Envelope
    )


def test_garbage_and_key_mismatch_are_rejected_an_unknown_type_is_not() -> None:
    placed = PLACED
    assert isinstance(triage(None, b"\xff not json"), Rejected)
    assert "differs from envelope key" in triage(b"order:other", placed.encode()).reason  # type: ignore[union-attr]
    unknown = unknown_event("order:o1", 1)
    assert triage(b"order:o1", unknown.encode()) == unknown
    assert unknown_type_reason(unknown) == (
        f"unknown event type {unknown.type!r} (entity order:o1 #1), its sequence still counts: "
        "upgrade the projector and rebuild the read models to show it"
    )
    assert unknown_type_reason(PLACED) is None


def test_a_record_without_its_key_is_rejected() -> None:
    verdict = triage(None, PLACED.encode())
    assert verdict == Rejected(f"record has no key (envelope key {PLACED.key!r})")


@pytest.mark.parametrize(
    "value",
    [None, b"\xff", b"[" * 100_000, b'{"a": NaN}', b"9" * 10_000, b"x" * 2_000_000, b"{}"],
)
def test_triage_never_raises_on_hostile_bytes(value: bytes | None) -> None:
    verdict = triage(b"order:o1", value)
    assert isinstance(verdict, Rejected) and 0 < len(verdict.reason) <= 300


def test_triage_turns_an_unexpected_exception_into_a_rejection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(triage_module, "unstorable_reason", broken)
    verdict = triage(PLACED.key.encode(), PLACED.encode())
    assert verdict == Rejected("RecursionError: maximum recursion depth exceeded")


# --- apply_batch on SQLite -----------------------------------------------------------------


def test_events_in_order_give_the_rows_of_the_pure_folds(engine: Engine) -> None:
    events = golden_events()
    done = apply(engine, events)
    assert (done.applied, done.duplicates, done.held) == (len(events), 0, 0)
    assert stored(engine) == expected_rows(events)


def test_events_out_of_order_and_duplicated_end_in_the_same_rows_as_in_order(
    tmp_path: Path, engine: Engine
) -> None:
    events = golden_events()
    messy = scrambled(events, seed=3, duplicates=0.2)
    done = apply(engine, messy, batch_size=17)
    assert done.applied == len(events)
    assert done.duplicates == len(messy) - len(events)
    assert done.held == 0
    assert stored(engine) == expected_rows(events)
    with fresh_database("sqlite", tmp_path) as url, read_engine(url) as clean:
        apply(clean, events)
        messy_tables, clean_tables = snapshot(engine), snapshot(clean)
    # Where things sit in the log differs between the two feeds; what they mean does not.
    by_position = ("projection_counters", "projection_checkpoints", "command_receipts")
    assert {k: v for k, v in messy_tables.items() if k not in by_position} == {
        k: v for k, v in clean_tables.items() if k not in by_position
    }
    receipts = [[row[:2] for row in t["command_receipts"]] for t in (messy_tables, clean_tables)]
    assert receipts[0] == receipts[1]


def test_a_duplicated_event_changes_no_row(engine: Engine) -> None:
    events = golden_events(10)
    apply(engine, events)
    before = snapshot(engine)
    done = apply(engine, [events[5], events[0], events[-1]])
    assert (done.applied, done.duplicates) == (0, 3)
    after = snapshot(engine)
    for table in before:
        if table not in ("projection_checkpoints", "projection_counters"):
            assert after[table] == before[table], table
    assert dict(after["projection_counters"])["duplicates"] == 3


def test_a_gap_holds_later_events_until_it_fills_and_is_reported_meanwhile(engine: Engine) -> None:
    order = [e for e in golden_events(1, 1) if e.key == "order:o000"]
    done = apply(engine, [order[0], *order[2:]])
    assert (done.applied, done.held) == (1, len(order) - 2)
    with engine.connect() as conn:
        assert queries.get_row(conn, ORDERS, "o000").status == "PENDING"  # type: ignore[union-attr]
        held = queries.held_events(conn)
        assert (held.count, held.oldest_since) == (len(order) - 2, NOW)
        assert queries.held_before(conn, NOW + timedelta(seconds=1)).examples[0] == (
            "order:o000",
            3,
        )
    done = apply(engine, [order[1]])
    assert (done.applied, done.held) == (len(order) - 1, 0)
    with engine.connect() as conn:
        assert queries.get_row(conn, ORDERS, "o000").status == "CONFIRMED"  # type: ignore[union-attr]
        assert queries.held_events(conn).count == 0


def test_an_unknown_type_is_counted_and_does_not_block_its_entity(engine: Engine) -> None:
    placed, pending = [e for e in golden_events(1, 1) if e.key == "order:o000"][:2]
    later = pending.model_copy(update={"sequence": 3})
    done = apply(engine, [placed, unknown_event("order:o000", 2), later])
    assert (done.applied, done.unknown["order.Renamed"], done.held) == (2, 1, 0)
    with engine.connect() as conn:
        assert queries.get_row(conn, ORDERS, "o000").last_sequence == 3  # type: ignore[union-attr]
        assert queries.counters(conn)["unknown_type"] == 1


def test_a_receipt_is_written_once_per_api_command_and_only_for_those(engine: Engine) -> None:
    events = golden_events(3, 1)
    commands = {e.causation_id or "" for e in events} - {""}
    commands = {c for c in commands if c.startswith("cmd-")}
    done = apply(engine, events)
    assert done.receipts == len(commands) == 4  # one stock set, three placements
    with engine.connect() as conn:
        assert queries.receipts_among(conn, [*commands, "cmd-other"]) == commands
    assert external_command_id("o000", "place") in commands


def test_receipts_older_than_the_retention_are_pruned(engine: Engine) -> None:
    apply(engine, golden_events(3, 1))
    with engine.begin() as conn:
        assert store.prune_receipts(conn, NOW - timedelta(seconds=1)) == 0
        assert store.prune_receipts(conn, NOW + timedelta(seconds=1)) == 4
        assert queries.receipts_among(conn, [external_command_id("o000", "place")]) == set()


class FixedEnds:
    """End offsets as a broker would report them."""

    async def get(self, topic: str) -> dict[int, int] | None:
        return {0: 100, 1: 7}


async def test_status_reports_lag_per_partition_and_flags_an_old_gap(engine: Engine) -> None:
    order = [e for e in golden_events(1, 1) if e.key == "order:o000"]
    apply(engine, [order[0], order[2]])  # sequence 2 is missing: 3 waits (since NOW, 2024)
    status = await projection_status(engine, "t", FixedEnds(), gap_alert_s=60)  # type: ignore[arg-type]
    assert [(p.partition, p.applied_offset, p.end_offset, p.lag) for p in status.partitions] == [
        (0, 2, 100, 98),
        (1, 0, 7, 7),
    ]
    assert (status.total_lag, status.held_events, status.oldest_held_since) == (105, 1, NOW)
    assert status.gap_alert
    assert status.counters == {"applied": 1}


def test_money_and_times_read_back_equal_to_what_the_fold_made(engine: Engine) -> None:
    events = golden_events(3, 1)
    # A time in another zone: SQLite keeps no zone, so it must be stored as UTC.
    elsewhere = T0.astimezone(timezone(timedelta(hours=5))) + timedelta(microseconds=7)
    placed = events[1].model_copy(update={"occurred_at": elsewhere})
    apply(engine, [events[0], placed, *events[2:]])
    with engine.connect() as conn:
        order = queries.get_row(conn, ORDERS, "o000")
    assert order is not None and order.total == Decimal("9.95")
    assert order.created_at == placed.occurred_at and order.created_at.tzinfo is not None


# --- waiters -----------------------------------------------------------------------------------


class Switchboard:
    """A probe whose answers the test controls; counts how often it is asked."""

    def __init__(self) -> None:
        self.receipts: set[str] = set()
        self.settled: set[str] = set()
        self.asked = 0

    def __call__(self, tokens: frozenset[str], orders: frozenset[str]) -> Arrived:
        self.asked += 1
        return Arrived(frozenset(tokens & self.receipts), frozenset(orders & self.settled))


async def test_a_thousand_waiters_finish_and_leave_no_bookkeeping() -> None:
    board = Switchboard()
    watch = ReadWatch(board, interval_s=0.01)
    await watch.start()
    try:
        tokens = [f"cmd-{i:032x}" for i in range(1000)]
        waiters = [asyncio.create_task(watch.receipt(t, timeout=10)) for t in tokens]
        finals = [asyncio.create_task(watch.settled(f"o{i}", timeout=10)) for i in range(10)]
        await asyncio.sleep(0.05)
        assert watch.open_slots == 1010
        board.receipts.update(tokens)
        board.settled.update(f"o{i}" for i in range(10))
        assert all(await asyncio.gather(*waiters, *finals))
        assert watch.open_slots == 0
        asked = board.asked
        await asyncio.sleep(0.1)
        assert board.asked == asked  # nobody waits: the poller sleeps
    finally:
        await watch.stop()


async def test_waiters_that_time_out_or_are_cancelled_leave_nothing_behind() -> None:
    watch = ReadWatch(Switchboard(), interval_s=0.01)
    await watch.start()
    try:
        timing_out = [watch.receipt(f"cmd-{i:032x}", timeout=0.05) for i in range(500)]
        cancelled = [asyncio.create_task(watch.settled("o1", timeout=10)) for _ in range(500)]
        assert not any(await asyncio.gather(*timing_out))
        assert watch.open_slots == 1  # the 500 waiters of o1 share one slot
        for task in cancelled:
            task.cancel()
        await asyncio.gather(*cancelled, return_exceptions=True)
        assert watch.open_slots == 0
    finally:
        await watch.stop()
