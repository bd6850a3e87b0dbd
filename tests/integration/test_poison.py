"""No hostile record stops a stream, on the real broker, for every topic a component consumes.

Every kind of hostile record (not UTF-8, not JSON, ``[`` x 100,000, a wrong shape, an
unknown type, a future schema version, no value, no key, another key than the envelope's,
one at the broker's maximum size) goes to every process command topic (iterated from
``PROCESS_CHANNELS``, so a topic added later is covered) and to the event topic, all in one
batch. The worker runs with CDC on, so the correlator's channels have their processes
(Debezium's topics, which Kafka Connect would create, are created empty here). Each must
come out on the dead-letter topic with its reason and its source topic, partition and
offset, the counters must rise, and afterwards an order placed through the API must
complete and show in the read model the projector (a real process) keeps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from sqlalchemy import Engine

from readside import queries, store
from runtime.topics import DEAD_LETTERS, EVENTS, PROCESS_CHANNELS
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.messages import SCHEMA_VERSION, Envelope
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK
from services.worker.deadletter import DeadLetter
from tests.integration.golden import T0
from tests.integration.harness import Stack, read_all
from tests.integration.readside import ProjectorProcess, every_consumer

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BROKER_MAX_RECORD = 1_048_000
"""Just under the broker's default ``message.max.bytes`` (1,048,588) with the key and the
record overhead."""


@dataclass(frozen=True)
class Hostile:
    kind: str
    key: bytes | None
    value: bytes | None
    reason: str
    """What the dead letter's reason must contain."""


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def hostile_records(channel: str) -> list[Hostile]:
    """One record of every hostile kind for ``channel``; the well-formed envelope they vary
    is a command for a process topic and a domain event for the event topic."""
    is_events = channel == EVENTS
    key = "order:poisoned" if is_events else f"poisoned-{channel}"
    good = Envelope.wrap(
        oc.OrderStatusChanged(status="CANCELLED") if is_events else lc.SetCapacity(on_hand=1),
        message_id=f"poison-{channel}",
        key=key,
        occurred_at=T0,
        entity_type="order" if is_events else None,
        sequence=1 if is_events else None,
    )
    fields = json.loads(good.encode())
    # An event of a type from a newer producer is applied as skipped (its sequence counts),
    # and dead-lettered so it shows; a command of an unknown type is only dead-lettered.
    unknown = (
        {**fields, "key": "product:unknown-first", "entity_type": "product", "type": "x.New"}
        if is_events
        else {**fields, "type": "ledger.Teleport"}
    )
    k = key.encode()
    return [
        Hostile("not UTF-8", k, b"\xff\xfe not utf-8", "not JSON: not UTF-8"),
        Hostile("not JSON", k, b"{not json", "not JSON"),
        Hostile("nested 100,000 deep", k, b"[" * 100_000, "JSON nested deeper than"),
        Hostile("wrong shape", k, _json({"hello": "world"}), "bad envelope"),
        Hostile(
            "unknown type",
            str(unknown["key"]).encode(),
            _json(unknown),
            "unknown event type 'x.New'" if is_events else "unknown message type",
        ),
        Hostile(
            "future schema version",
            k,
            _json({**fields, "schema_version": SCHEMA_VERSION + 1}),
            f"schema version {SCHEMA_VERSION + 1} is newer",
        ),
        Hostile("null value", k, None, "empty record (no value)"),
        Hostile("null key", None, good.encode(), "record has no key"),
        Hostile("another key", b"someone-else", good.encode(), "differs from envelope key"),
        Hostile(
            "broker maximum size",
            k,
            _json({**fields, "pad": "x" * (BROKER_MAX_RECORD - len(good.encode()) - 20)}),
            "bytes is larger than",
        ),
    ]


@dataclass(frozen=True)
class Sent:
    hostile: Hostile
    topic: str
    partition: int
    offset: int


@dataclass
class World:
    stack: Stack
    projector: ProjectorProcess
    engine: Engine
    sent: dict[str, list[Sent]]
    worker_counts_before: dict[str, float]
    projector_counts_before: dict[str, int]


async def _worker_counts(stack: Stack) -> dict[str, float]:
    url = f"http://127.0.0.1:{stack.settings.worker_web_port}/sagaline/metrics"
    async with httpx.AsyncClient() as http:
        response = await http.get(url, timeout=10)
    response.raise_for_status()
    counts: dict[str, float] = response.json()
    return counts


def _projector_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return queries.counters(conn)


async def _order_row_shows(engine: Engine, order_id: str, timeout: float = 60) -> str:
    """The read model's status of ``order_id`` once it is final."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        with engine.connect() as conn:
            row = store.load_rows(conn, ORDERS, [order_id]).get(order_id)
        if row is not None and row.status in oc.FINAL_STATUSES:
            return row.status
        await asyncio.sleep(0.2)
    raise AssertionError(f"order {order_id} never reached a final status in the read model")


async def _send_all(stack: Stack) -> dict[str, list[Sent]]:
    """Every hostile record of every channel, in one batch of sends."""
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.settings.kafka_bootstrap,
        max_request_size=2 * 1024 * 1024,  # the largest record is ~1 MB
        acks="all",
    )
    await producer.start()
    try:
        pending = []
        for channel in (*PROCESS_CHANNELS, EVENTS):
            topic = stack.settings.topic(channel)
            for hostile in hostile_records(channel):
                future = await producer.send(topic, hostile.value, key=hostile.key)
                pending.append((channel, topic, hostile, future))
        sent: dict[str, list[Sent]] = {}
        for channel, topic, hostile, future in pending:
            meta = await future
            sent.setdefault(channel, []).append(Sent(hostile, topic, meta.partition, meta.offset))
        # The product whose first event was of an unknown type gets a known second one: it
        # must be applied, not held behind the skipped first.
        follow_up = Envelope.wrap(
            lc.CapacitySet(on_hand=4, reserved=0),
            message_id="known-second",
            key="product:unknown-first",
            occurred_at=T0,
            entity_type="product",
            sequence=2,
        )
        await producer.send_and_wait(
            stack.settings.topic(EVENTS), follow_up.encode(), key=follow_up.key.encode()
        )
        return sent
    finally:
        await producer.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with every_consumer(tmp_path_factory.mktemp("poison")) as (stack, engine, projector):
        # Warm up: the projector follows the stream before the poison arrives.
        await stack.set_stock("warmup", 5)
        order = await stack.place([("warmup", 1)])
        assert await _order_row_shows(engine, order) == "CONFIRMED"
        before = await _worker_counts(stack)
        projector_before = await asyncio.to_thread(_projector_counts, engine)
        sent = await _send_all(stack)
        yield World(stack, projector, engine, sent, before, projector_before)


async def _letters_for(world: World, channel: str, timeout: float = 60) -> dict[int, Any]:
    """Each hostile record of ``channel`` (by index) -> its dead letter."""
    sent = world.sent[channel]
    wanted = {(s.topic, s.partition, s.offset): i for i, s in enumerate(sent)}
    found: dict[int, Any] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    while len(found) < len(sent) and asyncio.get_running_loop().time() < deadline:
        for record in await read_all(world.stack.settings, DEAD_LETTERS):
            letter = DeadLetter.decode(record.value)
            where = (letter["source_topic"], letter["partition"], letter["offset"])
            if where in wanted:
                found.setdefault(wanted[where], letter)
        if len(found) < len(sent):
            await asyncio.sleep(0.5)
    return found


@pytest.mark.parametrize("channel", [*PROCESS_CHANNELS, EVENTS])
async def test_every_hostile_record_is_dead_lettered_with_its_reason_and_position(
    world: World, channel: str
) -> None:
    letters = await _letters_for(world, channel)
    missing = [s.hostile.kind for i, s in enumerate(world.sent[channel]) if i not in letters]
    assert not missing, f"no dead letter on {channel} for: {missing}"
    stage = "projector" if channel == EVENTS else channel
    for i, sent in enumerate(world.sent[channel]):
        letter = letters[i]
        assert sent.hostile.reason in letter["reason"], (sent.hostile.kind, letter["reason"])
        assert letter["stage"] == stage
        # Every letter fits: a 1 MB record is named by digest, not carried.
        assert len(json.dumps(letter)) < 300_000, sent.hostile.kind
        if sent.hostile.kind == "broker maximum size":
            assert letter["value"] is None and letter["value_inline"] is False
            assert letter["value_size"] == len(sent.hostile.value or b"")


@pytest.mark.parametrize("channel", PROCESS_CHANNELS)
async def test_the_worker_counts_every_hostile_record(world: World, channel: str) -> None:
    await _letters_for(world, channel)
    after = await _worker_counts(world.stack)
    sent = len(world.sent[channel])
    for counter in ("invalid", "dead_lettered"):
        name = f"{channel}.{counter}"
        assert after.get(name, 0) - world.worker_counts_before.get(name, 0) == sent, name


async def test_a_normal_order_completes_after_the_poison(world: World) -> None:
    for channel in PROCESS_CHANNELS:
        await _letters_for(world, channel)
    await world.stack.set_stock("after-poison", 3)
    order = await world.stack.place([("after-poison", 2)])
    outcome = (await world.stack.tail.wait_for([order], 60))[order]
    assert (outcome.status, outcome.reason) == ("CONFIRMED", None)


async def test_the_projector_keeps_running_and_its_read_models_advance(world: World) -> None:
    await _letters_for(world, EVENTS)
    order = await world.stack.place([("warmup", 1)])
    assert await _order_row_shows(world.engine, order) == "CONFIRMED"
    assert world.projector.alive(), world.projector.tail_log()
    with world.engine.connect() as conn:
        stock = store.load_rows(conn, PRODUCT_STOCK, ["unknown-first"])
        positions = store.load_positions(conn, ["product:unknown-first", "order:poisoned"])
    # The unknown first event was skipped and its sequence counted: the second applied.
    assert stock["unknown-first"].on_hand == 4
    assert positions == {"product:unknown-first": 2}
    counts = await asyncio.to_thread(_projector_counts, world.engine)
    before = world.projector_counts_before
    assert counts["dead_lettered"] - before.get("dead_lettered", 0) == 9
    assert counts["unknown_type"] - before.get("unknown_type", 0) == 1
