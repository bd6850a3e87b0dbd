"""The projector on the real broker, as a real process: exactly-once rows across SIGKILLs.

One event log (golden sagas, scrambled per entity, some records twice, one garbage record,
one event of an unknown type, one gap that never fills) is projected twice into fresh
databases: once cleanly, once with the projector SIGKILLed twice in the middle of a batch.
Every table must come out identical, and equal to the pure folds applied in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer
from sqlalchemy import Engine

from readside import queries
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, create_topics
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.messages import Envelope
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK
from services.projector.runner import Projector
from services.worker.deadletter import DeadLetter
from tests.integration.golden import T0, expected_rows, golden_events, scrambled
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import (
    BACKENDS,
    ProjectorProcess,
    applied_offsets,
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BATCH = 40
DELAY_MS = 60  # the projector sleeps this long inside every batch's open transaction


@dataclass(frozen=True)
class Log:
    settings: Settings
    golden: list[Envelope]
    ends: dict[int, int]
    tmp: Path


def _extra_events() -> list[Envelope]:
    """An unknown type ahead of a known event of one product; an order whose first event
    never arrives (a gap that never fills)."""
    mystery = Envelope.wrap(
        lc.CapacitySet(on_hand=3, reserved=0),
        message_id="mystery-2",
        key="product:mystery",
        occurred_at=T0,
        entity_type="product",
        sequence=2,
    )
    unknown = mystery.model_copy(
        update={"type": "ledger.Recounted", "sequence": 1, "message_id": "mystery-1"}
    )
    ghost = Envelope.wrap(
        oc.OrderStatusChanged(status="CANCELLED", reason="?"),
        message_id="ghost-2",
        key="order:ghost",
        occurred_at=T0,
        saga_id="ghost",
        entity_type="order",
        sequence=2,
    )
    return [mystery, unknown, ghost]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def log(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Log]:
    assert broker_reachable(), "no Kafka broker: start it with `deploy/local/kafka.sh start`"
    tmp = tmp_path_factory.mktemp("projector-crash")
    settings = isolated_settings(tmp, projector_batch_size=BATCH)
    await create_topics(settings)
    golden = golden_events(orders=150, products=8)
    records: list[Envelope | tuple[bytes, bytes]] = [
        *scrambled([*golden, *_extra_events()], seed=11, duplicates=0.15)
    ]
    records.insert(len(records) // 2, (b"order:o001", b"{not json"))
    ends = await produce(settings, records)
    yield Log(settings, golden, ends, tmp)


def _projector(log: Log, url: str, name: str, **overrides: object) -> ProjectorProcess:
    values = {"database_url": url, "app_id": f"{log.settings.app_id}-{name}", **overrides}
    return ProjectorProcess(log.settings.model_copy(update=values), log.tmp)


async def _run_to_end(projector: ProjectorProcess, engine: Engine, log: Log) -> None:
    projector.start()
    try:
        await wait_until_applied(engine, log.settings.topic(EVENTS), log.ends, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{projector.tail_log()}") from exc
    finally:
        projector.stop()


async def _applied(engine: Engine, log: Log) -> int:
    offsets = await asyncio.to_thread(applied_offsets, engine, log.settings.topic(EVENTS))
    return sum(offsets.values())


async def _kill_inside_a_batch(
    projector: ProjectorProcess, engine: Engine, log: Log, fraction: float, attempts: int = 5
) -> int:
    """Start the projector; once ``fraction`` of the log is applied, SIGKILL it right after
    a commit, while the next batch sleeps inside its open transaction (rows written, not
    committed). Returns the offsets applied at the kill.

    A busy machine can delay this test process past the whole pause, so the kill lands
    after a later commit; such an attempt is still a crash, but not one inside a batch, so
    it is retried (the restart is itself one more recovery to verify)."""
    total = sum(log.ends.values())
    for _ in range(attempts):
        done = await _applied(engine, log)  # only a commit after the start counts
        projector.start()
        deadline = time.monotonic() + 60
        while True:
            now = await _applied(engine, log)
            if now != done and now >= fraction * total:
                break
            if time.monotonic() > deadline or not projector.alive():
                raise AssertionError(f"never reached {fraction:.0%}:\n{projector.tail_log()}")
            done = now
            await asyncio.sleep(0.005)
        await asyncio.sleep(DELAY_MS / 3000)
        projector.kill()
        if await _applied(engine, log) == now:  # the batch in progress never committed
            return now
    raise AssertionError(f"no kill landed inside a batch in {attempts} attempts")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_sigkill_mid_batch_and_restart_gives_exactly_the_rows_of_a_clean_run(
    log: Log, backend: str
) -> None:
    with (
        fresh_database(backend, log.tmp) as clean_url,
        fresh_database(backend, log.tmp) as crash_url,
        read_engine(clean_url) as clean,
        read_engine(crash_url) as crashed,
    ):
        await _run_to_end(_projector(log, clean_url, f"{backend}-clean"), clean, log)
        victim = _projector(log, crash_url, f"{backend}-crash", projector_commit_delay_ms=DELAY_MS)
        first = await _kill_inside_a_batch(victim, crashed, log, 0.25)
        second = await _kill_inside_a_batch(victim, crashed, log, 0.6)
        assert 0 < first < second < sum(log.ends.values())
        await _run_to_end(victim, crashed, log)
        assert victim.starts >= 3  # two crashes inside a batch, then the clean finish
        assert snapshot(crashed) == snapshot(clean)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_out_of_order_duplicated_and_odd_events_end_in_the_rows_of_the_ordered_folds(
    log: Log, backend: str
) -> None:
    with fresh_database(backend, log.tmp) as url, read_engine(url) as engine:
        await _run_to_end(_projector(log, url, f"{backend}-order"), engine, log)
        with engine.connect() as conn:
            expected = expected_rows(log.golden)
            for order_id, order in expected.orders.items():
                assert queries.get_row(conn, ORDERS, order_id) == order
            for product_id, stock in expected.stock.items():
                assert queries.get_row(conn, PRODUCT_STOCK, product_id) == stock
            timeline = {s for saga in expected.orders for s in queries.saga_timeline(conn, saga)}
            assert timeline == expected.timeline
            mystery = queries.get_row(conn, PRODUCT_STOCK, "mystery")
            assert mystery is not None and (mystery.on_hand, mystery.last_sequence) == (3, 2)
            assert queries.get_row(conn, ORDERS, "ghost") is None
            held = queries.held_events(conn)
            counters = queries.counters(conn)
        assert held.count == 1  # the ghost's event, behind a gap that never fills
        assert counters["unknown_type"] == 1
        assert counters["dead_lettered"] == 1
        assert counters["applied"] == len(log.golden) + 1  # + the mystery's known event
        positions = dict(snapshot(engine)["entity_positions"])
        assert positions == expected.positions | {"product:mystery": 2}


async def test_a_malformed_record_goes_to_the_dead_letter_topic(log: Log) -> None:
    consumer = AIOKafkaConsumer(
        log.settings.topic(DEAD_LETTERS),
        bootstrap_servers=log.settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=5000)
    finally:
        await consumer.stop()
    letters = [DeadLetter.decode(r.value) for rs in batch.values() for r in rs]
    assert letters, "nothing was dead-lettered"
    # The garbage record, and the event of an unknown type (applied as skipped all the same),
    # once per projector run that read it.
    assert {(d["stage"], d["key"]) for d in letters} == {
        ("projector", "order:o001"),
        ("projector", "product:mystery"),
    }
    for d in letters:
        if d["key"] == "order:o001":
            assert d["value"] == "{not json" and "not JSON" in d["reason"]
        else:
            assert "unknown event type 'ledger.Recounted'" in d["reason"]
            assert "its sequence still counts" in d["reason"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_duplicated_event_changes_nothing(tmp_path: Path, backend: str) -> None:
    settings = isolated_settings(tmp_path)
    await create_topics(settings)
    events = golden_events(orders=10, products=2)
    topic = settings.topic(EVENTS)
    with fresh_database(backend, tmp_path) as url, read_engine(url) as engine:
        settings = settings.model_copy(update={"database_url": url})
        stop = asyncio.Event()
        running = asyncio.create_task(Projector(settings, engine).run(stop))
        try:
            await wait_until_applied(engine, topic, await produce(settings, events))
            before = snapshot(engine)
            again = [events[0], events[7], events[-1], events[7]]
            await wait_until_applied(engine, topic, await produce(settings, again))
            after = snapshot(engine)
        finally:
            stop.set()
            await running
    moved = {"projection_checkpoints", "projection_counters"}
    assert {t: r for t, r in after.items() if t not in moved} == {
        t: r for t, r in before.items() if t not in moved
    }
    counters = dict(after["projection_counters"])
    assert counters["duplicates"] == 4 and counters["applied"] == len(events)
