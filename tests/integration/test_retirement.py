"""Retirement on a real broker (sagas/machinery/retirement.py): a finished order's record
becomes a marker, a redelivered PlaceOrder for it starts nothing, the marker's expiry
deletes the key by tombstones, and after that the id is new again (the documented limit).
A stray reply for an unknown id leaves no key. Retentions are seconds here."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from faults.topics import Raw, read_topic
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import ORDER_SAGA, changelog_topic
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.messages import Envelope
from services.worker.positions import position_key
from tests.integration.harness import Stack, isolated_settings, read_all, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

RETIRE_S, MARKER_S = 3.0, 12.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("retirement")
    settings = isolated_settings(tmp, retire_after_s=RETIRE_S, retired_marker_s=MARKER_S)
    async with running_stack(settings, tmp) as s:
        yield s


async def changelog(settings: Settings) -> list[Raw]:
    return await read_topic(settings.kafka_bootstrap, changelog_topic(settings, ORDER_SAGA))


async def until_changelog(settings: Settings, predicate: object, timeout: float) -> list[Raw]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        records = await changelog(settings)
        if predicate(records):  # type: ignore[operator]
            return records
        assert loop.time() < deadline, "the changelog never showed it"
        await asyncio.sleep(0.5)


def last_value(records: list[Raw], key: str) -> tuple[bool, bytes | None]:
    """(whether the changelog holds ``key`` at all, its last value)."""
    mine = [r for r in records if r.key == key.encode()]
    return (bool(mine), mine[-1].value if mine else None)


def is_marker(value: bytes | None) -> bool:
    return value is not None and json.loads(value).get("retired_at") is not None


async def produce(settings: Settings, key: str, value: bytes) -> tuple[int, int]:
    producer = AIOKafkaProducer(**aiokafka_options(settings))
    await producer.start()
    try:
        meta = await producer.send_and_wait(settings.topic(ORDER_SAGA), value, key=key.encode())
        return meta.partition, meta.offset
    finally:
        await producer.stop()


async def processed_past(settings: Settings, partition: int, offset: int) -> None:
    """Wait until the worker stored a position past ``offset`` of the order-saga topic."""
    where = position_key(settings.topic(ORDER_SAGA), partition)

    def done(records: list[Raw]) -> bool:
        _, value = last_value(records, where)
        return value is not None and int(value) > offset

    await until_changelog(settings, done, 30)


async def test_a_placeorder_after_retirement_starts_nothing_and_after_the_marker_anew(
    stack: Stack,
) -> None:
    await stack.set_stock("kiwi", 10)
    order = await stack.place([("kiwi", 1)])
    assert (await stack.tail.wait_for([order], 30))[order].status == "CONFIRMED"
    [placement] = [
        r
        for r in await read_all(stack.settings, ORDER_SAGA)
        if r.key == order.encode() and Envelope.decode(r.value).type == oc.PlaceOrder.TYPE
    ]
    # the final record retires: the changelog's last value of the key is its marker
    records = await until_changelog(
        stack.settings, lambda rs: is_marker(last_value(rs, order)[1]), RETIRE_S + 20
    )
    assert len(last_value(records, order)[1] or b"") < 400
    events = len(stack.tail.events_of(f"order:{order}"))
    # the same PlaceOrder again, byte for byte, and one under a new message id
    assert placement.value is not None
    again = Envelope.decode(placement.value)
    renamed = again.model_copy(update={"message_id": uuid.uuid4().hex}).encode()
    await produce(stack.settings, order, placement.value)
    partition, offset = await produce(stack.settings, order, renamed)
    await processed_past(stack.settings, partition, offset)
    assert len(stack.tail.events_of(f"order:{order}")) == events  # nothing started
    assert is_marker(last_value(await changelog(stack.settings), order)[1])
    # the marker's retention ends: the key is deleted by a tombstone, and then (the
    # documented limit, README "What Sagaline guarantees") the same PlaceOrder is new
    await until_changelog(
        stack.settings,
        lambda rs: last_value(rs, order) == (True, None),
        MARKER_S + 20,
    )
    await produce(stack.settings, order, placement.value)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(stack.tail.events_of(f"order:{order}")) == events:
        assert loop.time() < deadline, "the placement after the marker started no saga"
        await asyncio.sleep(0.2)
    assert stack.tail.events_of(f"order:{order}")[events].type == oc.OrderPlaced.TYPE


async def test_a_stray_reply_for_an_unknown_id_leaves_no_key(stack: Stack) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    reply = Envelope.wrap(
        lc.Reserved(
            on_hand=1, reserved=1, reservation_id=f"{ghost}:p1", quantity=1, expires_at="x"
        ),
        message_id=uuid.uuid4().hex,
        key=ghost,
        saga_id=ghost,
        occurred_at=datetime.now(UTC),
    )
    partition, offset = await produce(stack.settings, ghost, reply.encode())
    await processed_past(stack.settings, partition, offset)
    assert last_value(await changelog(stack.settings), ghost) == (False, None)
