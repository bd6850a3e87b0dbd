"""In-flight instances by saga type and version, read from the worker's tables' changelogs:
what ``sagaline versions`` prints, and what says when an old version can be deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import changelog_topic, topic_partitions
from sagas.machinery.history import is_chunk_key
from sagas.machinery.process import Process
from sagas.machinery.record import Record
from sagas.machinery.versions import Versions, in_flight, version_of

OWN_KEY = "\x00"
"""Table keys of the worker's own (positions, the deadline index), never a record."""


@dataclass(frozen=True)
class ChannelVersions:
    channel: str
    newest: int
    listed: tuple[int, ...]
    """The versions its channel keeps beside the newest."""
    in_flight: Counter[int]

    def rows(self) -> list[tuple[int, int, str]]:
        """(version, in flight, what ``sagaline versions`` says of it) for every version
        listed, in flight or newest."""
        rows = []
        for version in sorted({*self.listed, *self.in_flight, self.newest}):
            n = self.in_flight.get(version, 0)
            if version == self.newest:
                said = f"{n} in flight (new instances start here)"
            elif version not in self.listed:
                said = f"{n} in flight, NOT LISTED: their messages are refused"
            elif n:
                said = f"{n} in flight: keep it"
            else:
                said = "none in flight: it can be deleted"
            rows.append((version, n, said))
        return rows

    def lines(self) -> list[str]:
        said = [f"{self.channel}: newest version {self.newest}"]
        return said + [f"  version {version}: {text}" for version, _, text in self.rows()]


def latest(values: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, bytes]:
    """The table a changelog's records leave (a later write of a key wins, None deletes)."""
    table: dict[str, bytes] = {}
    for raw_key, value in values:
        if raw_key is None:
            continue
        key = raw_key.decode("utf-8", "replace")
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def count(process: Process[Any], table: dict[str, bytes]) -> ChannelVersions:
    codec = Record.codec(process.state_type)
    records = [
        codec.decode(key, raw, table.get)
        for key, raw in table.items()
        if not key.startswith(OWN_KEY) and not is_chunk_key(key)
    ]
    older = tuple(sorted(process.by_version)) if isinstance(process, Versions) else ()
    newest = version_of(process.newest if isinstance(process, Versions) else process)
    listed = tuple(v for v in older if v != newest)
    return ChannelVersions(process.name, newest, listed, in_flight(process, records))


async def read_changelog(settings: Settings, channel: str) -> dict[str, bytes]:
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = await topic_partitions(consumer, changelog_topic(settings, channel))
        return latest(await _read_all(consumer, partitions))
    finally:
        await consumer.stop()


async def _read_all(
    consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition]
) -> list[tuple[bytes | None, bytes | None]]:
    end = await consumer.end_offsets(list(partitions))
    left = {tp for tp in partitions if end[tp] > 0}
    if not left:
        return []
    consumer.assign(list(left))
    await consumer.seek_to_beginning(*left)
    read: list[tuple[bytes | None, bytes | None]] = []
    while left:
        batch = await consumer.getmany(*left, timeout_ms=1000)
        for tp, records in batch.items():
            read += [(r.key, r.value) for r in records if r.offset < end[tp]]
        for tp in list(left):
            if await consumer.position(tp) >= end[tp]:
                left.discard(tp)
    return read
