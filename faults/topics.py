"""Reading whole topics (the event topic, the dead-letter topic) and writing raw records."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from runtime.topics import topic_partitions
from services.worker.positions import parse_position_key


@dataclass(frozen=True)
class Raw:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Raw]:
    """Every record on ``topic`` up to the end offsets as of now (from the beginning)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[Raw] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {timeout} s")
            for tp, batch in (await consumer.getmany(timeout_ms=300)).items():
                records.extend(
                    Raw(tp.topic, tp.partition, r.offset, r.key, r.value)
                    for r in batch
                    if r.offset < ends[tp]
                )
        return records
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps: list[TopicPartition] = await topic_partitions(consumer, topic)
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offset per (topic, partition)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in committed.items()}


async def group_lag(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    """Per ``topic[partition]`` with a lag: end offset minus the group's committed offset."""
    committed = await committed_offsets(bootstrap, group)
    lag: dict[str, int] = {}
    for topic in topics:
        for partition, end in (await end_offsets(bootstrap, topic)).items():
            done = max(committed.get((topic, partition), 0), 0)
            if end > done:
                lag[f"{topic}[{partition}]"] = end - done
    return lag


async def stored_positions(bootstrap: str, changelogs: list[str]) -> dict[tuple[str, int], int]:
    """The worker's own record of where each input partition resumes: the latest position
    each process's table wrote to its changelog (see services/worker/positions.py)."""
    positions: dict[tuple[str, int], int] = {}
    for changelog in changelogs:
        for record in await read_topic(bootstrap, changelog):
            where = None if record.key is None else parse_position_key(record.key.decode())
            if where is not None and record.value is not None:
                positions[where] = int(record.value)
    return positions


async def position_lag(bootstrap: str, topics: list[str], changelogs: list[str]) -> dict[str, int]:
    """Per ``topic[partition]`` with a lag: end offset minus the worker's stored position."""
    stored = await stored_positions(bootstrap, changelogs)
    lag: dict[str, int] = {}
    for topic in topics:
        for partition, end in (await end_offsets(bootstrap, topic)).items():
            done = stored.get((topic, partition), 0)
            if end > done:
                lag[f"{topic}[{partition}]"] = end - done
    return lag
