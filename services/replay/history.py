"""The recorded history, read off Kafka: every process topic and the event topic, from
their earliest records to the end offsets they had when the read began."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, topic_partitions
from sagas.machinery.replay import KeyHistory, Recording
from sagas.machinery.replay_compare import Sent
from sagas.machinery.step import EVENTS_CHANNEL
from sagas.messages import ContractError, Envelope
from services.worker.deadletter import DeadLetter

FETCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Raw:
    """One Kafka record of a topic of ``channel``."""

    channel: str
    partition: int
    value: bytes | None
    offset: int = -1


@dataclass(frozen=True)
class RecordedHistory:
    histories: list[KeyHistory]
    recording: Recording
    records: int
    undecodable: int
    """Records no envelope could be read from (the worker dead-lettered them)."""
    until: datetime | None
    """The latest time a record holds: the end of the recording."""
    facts_truncated: tuple[int, ...]
    """Partitions of the event topic whose older records were deleted: facts of the oldest
    decisions may be missing from the comparison."""


def assemble(
    raws: Iterable[Raw],
    earliest: Mapping[tuple[str, int], int],
    letters: Mapping[tuple[str, int, int], str] | None = None,
) -> RecordedHistory:
    """Group the records into each key's inputs (in partition order) and every message sent;
    ``earliest``: the first offset each (channel, partition) still holds; ``letters``: the
    (channel, partition, offset) of each input the worker dead-lettered, and why."""
    letters = letters or {}
    dead: dict[str, str] = {}
    inputs: dict[tuple[str, str], list[Envelope]] = defaultdict(list)
    partition_of: dict[tuple[str, str], int] = {}
    sent: list[Sent] = []
    records = undecodable = 0
    until: datetime | None = None
    for raw in raws:
        records += 1
        try:
            envelope = Envelope.decode(raw.value)
        except ContractError:
            undecodable += 1
            continue
        until = envelope.occurred_at if until is None else max(until, envelope.occurred_at)
        sent.append(Sent(raw.channel, envelope))
        if (why := letters.get((raw.channel, raw.partition, raw.offset))) is not None:
            dead[envelope.message_id] = why
        if raw.channel != EVENTS_CHANNEL:
            inputs[(raw.channel, envelope.key)].append(envelope)
            partition_of[(raw.channel, envelope.key)] = raw.partition
    histories = [
        KeyHistory(channel, key, envs, earliest.get((channel, partition_of[(channel, key)]), 0))
        for (channel, key), envs in inputs.items()
    ]
    cut = tuple(p for (c, p), first in sorted(earliest.items()) if c == EVENTS_CHANNEL and first)
    recording = Recording(sent, dead)
    return RecordedHistory(histories, recording, records, undecodable, until, cut)


async def read_history(settings: Settings, channels: Sequence[str]) -> RecordedHistory:
    """Read the topics of ``channels`` and the event topic up to their end offsets now."""
    return assemble(*await read_raw(settings, channels))


async def read_raw(
    settings: Settings, channels: Sequence[str]
) -> tuple[list[Raw], dict[tuple[str, int], int], dict[tuple[str, int, int], str]]:
    """The records of :func:`read_history`, the earliest offset of each partition and the
    dead letters' positions, before they are grouped."""
    consumer = AIOKafkaConsumer(
        **aiokafka_options(settings),
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES,
    )
    await consumer.start()
    try:
        channel_of: dict[str, str] = {}
        partitions: list[TopicPartition] = []
        for channel in (*channels, EVENTS_CHANNEL):
            topic = settings.topic(EVENTS if channel == EVENTS_CHANNEL else channel)
            channel_of[topic] = channel
            partitions += await topic_partitions(consumer, topic)
        raws = await _read(consumer, partitions, channel_of)
        begin = await consumer.beginning_offsets(partitions)
        earliest = {(channel_of[tp.topic], tp.partition): o for tp, o in begin.items()}
        dead_letters = await topic_partitions(consumer, settings.topic(DEAD_LETTERS))
        letters = _letters(await _read(consumer, dead_letters, {}), channel_of)
    finally:
        await consumer.stop()
    return raws, earliest, letters


async def dead_letters(
    settings: Settings, channels: Sequence[str]
) -> dict[tuple[str, int, int], str]:
    """The (channel, partition, offset) of every input of ``channels`` the worker
    dead-lettered, and why."""
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        channel_of = {settings.topic(c): c for c in channels}
        partitions = await topic_partitions(consumer, settings.topic(DEAD_LETTERS))
        return _letters(await _read(consumer, partitions, {}), channel_of)
    finally:
        await consumer.stop()


def _letters(raws: list[Raw], channel_of: dict[str, str]) -> dict[tuple[str, int, int], str]:
    """Where each dead-lettered input was, and why (services/worker/deadletter.py)."""
    found: dict[tuple[str, int, int], str] = {}
    for raw in raws:
        try:
            letter = DeadLetter.decode(raw.value or b"")
        except ValueError:
            continue
        channel = channel_of.get(str(letter.get("source_topic")))
        partition, offset = letter.get("partition"), letter.get("offset")
        if channel is not None and isinstance(partition, int) and isinstance(offset, int):
            found[(channel, partition, offset)] = str(letter.get("reason"))
    return found


async def _read(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], channel_of: dict[str, str]
) -> list[Raw]:
    if not partitions:
        return []
    end = await consumer.end_offsets(partitions)
    begin = await consumer.beginning_offsets(partitions)
    left = {tp for tp in partitions if end[tp] > begin[tp]}
    if not left:
        return []
    consumer.assign(list(left))
    await consumer.seek_to_beginning(*left)
    raws: list[Raw] = []
    while left:
        batch = await consumer.getmany(*left, timeout_ms=1000)
        for tp, records in batch.items():
            channel = channel_of.get(tp.topic, tp.topic)
            raws += [
                Raw(channel, tp.partition, r.value, r.offset) for r in records if r.offset < end[tp]
            ]
            if records and records[-1].offset + 1 >= end[tp]:
                left.discard(tp)
        for tp in list(left):
            if await consumer.position(tp) >= end[tp]:
                left.discard(tp)  # the end is past records aborted or compacted away
    return raws
