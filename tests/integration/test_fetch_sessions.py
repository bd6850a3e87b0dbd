"""Incremental fetch sessions (services/worker/fetch_sessions.py) on the real broker: every
record arrives once and in order while the fetches after the first list only the
partitions that moved, and a session the broker forgot is opened again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.consumer.fetcher import Fetcher

from services.worker.fetch_sessions import SessionFetchRequest, use_fetch_sessions
from tests.integration.harness import BOOTSTRAP

pytestmark = [pytest.mark.integration]

PARTITIONS = 8


@pytest.fixture
async def topic() -> AsyncIterator[str]:
    name = f"fetch-sessions-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, PARTITIONS, 1)])
        yield name
        await admin.delete_topics([name])
    finally:
        await admin.close()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Sessions on for this test only; each session request's (session id, epoch, partitions
    sent) as it is built."""
    monkeypatch.setattr(Fetcher, "_get_actions_per_node", Fetcher._get_actions_per_node)
    monkeypatch.setattr(Fetcher, "_sagaline_sessions", False, raising=False)
    use_fetch_sessions()
    seen: list[tuple[int, int, int]] = []
    build = SessionFetchRequest.build

    def recording(self: SessionFetchRequest, struct_class: Any) -> Any:
        struct = build(self, struct_class)
        seen.append(
            (struct.session_id, struct.session_epoch, sum(len(p) for _, p in struct.topics))
        )
        return struct

    monkeypatch.setattr(SessionFetchRequest, "build", recording)
    return seen


async def send(
    producer: AIOKafkaProducer, topic: str, partitions: range, first: int, n: int
) -> None:
    for partition in partitions:
        for i in range(first, first + n):
            await producer.send(topic, f"{partition}:{i}".encode(), partition=partition)
    await producer.flush()


async def take(consumer: AIOKafkaConsumer, count: int) -> dict[int, list[str]]:
    got: dict[int, list[str]] = {}
    taken = 0
    for _ in range(200):
        batches = await consumer.getmany(timeout_ms=200)
        for tp, records in batches.items():
            got.setdefault(tp.partition, []).extend(r.value.decode() for r in records)
            taken += len(records)
        if taken >= count:
            break
    assert taken == count, f"{taken} of {count} records"
    return got


async def test_every_record_arrives_once_and_in_order_with_fetches_of_what_moved(
    topic: str, built: list[tuple[int, int, int]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    await producer.start()
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        await send(producer, topic, range(PARTITIONS), 0, 10)
        first = await take(consumer, PARTITIONS * 10)
        assert first == {p: [f"{p}:{i}" for i in range(10)] for p in range(PARTITIONS)}

        await send(producer, topic, range(2, 4), 10, 5)  # two partitions move
        second = await take(consumer, 10)
        assert second == {p: [f"{p}:{i}" for i in range(10, 15)] for p in (2, 3)}
        await send(producer, topic, range(5, 6), 15, 1)  # then one more
        assert await take(consumer, 1) == {5: ["5:15"]}

        assert built[0] == (0, 0, PARTITIONS)  # the first fetch: full, opening a session
        [session_id] = {s for s, _, _ in built[1:]}
        assert session_id != 0, "the broker gave no session"
        assert [epoch for _, epoch, _ in built[1:]] == list(range(1, len(built)))
        # After the first records of all 8 came, each fetch listed what moved: 2 partitions.
        assert (session_id, 2) in {(s, sent) for s, _, sent in built}

        # The broker forgets the session (a restart, its cache evicted): opened again.
        [session] = consumer._fetcher._sessions.values()
        session.id += 1_000_000  # a session id the broker never gave
        await send(producer, topic, range(PARTITIONS), 16, 1)
        third = await take(consumer, PARTITIONS)
        assert third == {p: [f"{p}:16"] for p in range(PARTITIONS)}
        assert (0, 0, PARTITIONS) in built[2:]  # a full fetch opened a new session
        assert session.id not in (0, session_id + 1_000_000)
    finally:
        await consumer.stop()
        await producer.stop()
