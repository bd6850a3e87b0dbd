"""The console's view of the dead-letter topic: one page at a time, and one letter to
re-drive, never the whole topic.

The topic keeps letters 30 days and a letter may be ~0.5 MB (two inline parts of 256 KiB),
so the API never reads it whole: a page is the ``size`` offsets just before ``before``
(newest first, the topic's end when ``before`` is None), each letter trimmed as it is read
(its key and value cut to a preview, every other field bounded), and the consumer fetches
at most :data:`FETCH_BYTES` at a time. What the API holds for a page is the page's trimmed
letters and one fetch. A re-drive reads the one letter at its offset, whole, and is sent
only to Sagaline's own process channels (:func:`redrive_topics`).

The broker is reached through :class:`LetterLog` (a one-partition topic read by offset
range), so tests pass a log that counts what it was asked to read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from runtime.topics import REDRIVES
from sagas.catalog import CHANNELS
from sagas.contracts.deadletters import DeadLetterBody
from sagas.untrusted import JsonRefused, read_json
from services import deadletters
from services.deadletters import Letter, Redrive

FETCH_BYTES = 1024 * 1024
"""Most bytes one fetch brings (a letter larger than this still comes, alone: Kafka returns
at least one batch)."""
PREVIEW_CHARS = 200
"""How much of a letter's key and value the list shows."""
FIELD_CHARS = 1000
"""Any other text field of a listed letter is cut to this (a letter's reason is at most
1000 characters when Sagaline wrote it; anything may be on the topic)."""
Record = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of one record."""


class LetterLog(Protocol):
    """A one-partition topic, read by offsets."""

    async def bounds(self) -> tuple[int, int]:
        """(the first offset still kept, the offset the next record will get)."""
        ...

    def records(self, start: int, stop: int) -> AsyncIterator[Record]:
        """The records at offsets ``start`` (included) to ``stop`` (excluded), in order."""
        ...


@dataclass(frozen=True)
class LetterPage:
    letters: list[Letter]
    """Newest first, trimmed (:func:`trimmed`)."""
    before: int
    """The offset this page ends before (the topic's end for the newest page)."""
    older: int | None
    """``before`` of the next older page; None when this page reaches the topic's start."""
    newer: int | None
    """``before`` of the next newer page; None when this is the newest (or next to it:
    then the newest page's link has no ``before``)."""
    first: int
    end: int

    @property
    def newest(self) -> bool:
        return self.before >= self.end


async def read_page(log: LetterLog, before: int | None, size: int) -> LetterPage:
    """The ``size`` letters just before offset ``before`` (the newest when None)."""
    first, end = await log.bounds()
    stop = end if before is None else max(min(before, end), first)
    start = max(first, stop - size)
    letters = [Letter(o, trimmed(_body(v))) async for o, _k, v in log.records(start, stop)]
    letters.reverse()
    newer = stop + size if stop + size < end else None
    return LetterPage(letters, stop, start if start > first else None, newer, first, end)


async def read_letter(log: LetterLog, letter_offset: int) -> Letter | None:
    """The whole letter at ``letter_offset``; None when there is none (never written, or
    deleted by retention)."""
    first, end = await log.bounds()
    if not first <= letter_offset < end:
        return None
    async for offset, _key, value in log.records(letter_offset, letter_offset + 1):
        if offset == letter_offset:
            return Letter(offset, _body(value))
    return None


async def redrives_of(log: LetterLog, sources: Collection[str]) -> dict[str, dict[str, Any]]:
    """The last re-drive of each of ``sources`` (letters' source positions) on the re-drive
    topic (compacted: a record per re-driven letter). Read whole, but only the records of
    ``sources`` are kept."""
    wanted = set(sources)
    found: dict[str, dict[str, Any]] = {}
    if not wanted:
        return found
    first, end = await log.bounds()
    async for _offset, key, value in log.records(first, end):
        source = None if key is None else key.decode("utf-8", "replace")
        if source in wanted and value is not None:
            found[source] = _body(value)
    return found


def redrive_topics(settings: Settings) -> frozenset[str]:
    """Where a re-drive may send: the topics of Sagaline's process channels (the declared
    ``sagas.catalog.CHANNELS``), whose consumers drop a record they processed before. Not
    the domain-event topic (the projector skips an event it has passed by sequence), nor a
    changelog, nor anyone else's topic."""
    return frozenset(settings.topic(channel.name) for channel in CHANNELS)


def _body(value: bytes | None) -> dict[str, Any]:
    """A letter's JSON object, through the one reader of untrusted bytes (linear in their
    length, nesting bounded): anyone who may produce to the topic may write anything on it.
    What is not a letter says so."""
    try:
        body = read_json(value or b"null")
    except JsonRefused as refused:
        return {"reason": f"(not a dead letter: {refused.problem})"}
    if not isinstance(body, dict):
        return {"reason": "(not a dead letter: not a JSON object)"}
    return body


def trimmed(body: dict[str, Any]) -> dict[str, Any]:
    """What the list shows of a letter: the key and value cut to a preview, other text cut
    to :data:`FIELD_CHARS`, nested values dropped; at most the fields a letter has."""
    kept: dict[str, Any] = {}
    for name in DeadLetterBody.model_fields:
        if name not in body:
            continue
        value = body[name]
        limit = PREVIEW_CHARS if name in ("key", "value") else FIELD_CHARS
        if isinstance(value, str):
            kept[name] = value if len(value) <= limit else value[:limit] + "…"
            if len(value) > limit:
                kept[f"{name}_cut"] = True
        elif value is None or isinstance(value, bool | int | float):
            kept[name] = value
    return kept


# --- the broker ------------------------------------------------------------------------


class KafkaLog:
    """:class:`LetterLog` over partition 0 of a topic, through a started consumer."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        self.consumer = consumer
        self.tp = TopicPartition(topic, 0)
        consumer.assign([self.tp])

    async def bounds(self) -> tuple[int, int]:
        first = (await self.consumer.beginning_offsets([self.tp]))[self.tp]
        end = (await self.consumer.end_offsets([self.tp]))[self.tp]
        return first, end

    async def records(self, start: int, stop: int) -> AsyncIterator[Record]:
        if start >= stop:
            return
        self.consumer.seek(self.tp, start)
        while await self.consumer.position(self.tp) < stop:
            batch = await self.consumer.getmany(self.tp, timeout_ms=1000)
            for record in batch.get(self.tp, []):
                if record.offset >= stop:
                    return
                yield record.offset, record.key, record.value


class DeadLetterDesk:
    """What the console's dead-letter page does on the broker: read a topic by offsets,
    and re-send a letter's record (as ``sagaline deadletters redrive`` does)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @asynccontextmanager
    async def log(self, topic: str) -> AsyncIterator[LetterLog]:
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self.settings),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=FETCH_BYTES,
            fetch_max_bytes=FETCH_BYTES,
        )
        async with _started(self.settings, consumer):
            yield KafkaLog(consumer, topic)

    async def resend(self, letter: Letter, forced: bool) -> Redrive:
        """Send the letter's original record (digests checked) to its source partition, and
        record the re-drive; :class:`deadletters.RedriveRefused` says why not."""
        settings = self.settings
        key, value = await deadletters.original_record(settings, letter)
        producer = AIOKafkaProducer(
            **aiokafka_options(settings),
            enable_idempotence=True,
            acks="all",
            max_request_size=2 * 1024 * 1024,
        )
        async with _started(settings, producer):
            meta = await producer.send_and_wait(
                letter.body["source_topic"], value, key=key, partition=int(letter.body["partition"])
            )
            done = Redrive(
                letter.source, meta.partition, meta.offset, forced, datetime.now(UTC).isoformat()
            )
            await producer.send_and_wait(
                settings.topic(REDRIVES),
                deadletters.redrive_record(letter.letter_offset, done),
                key=letter.source.encode(),
            )
        return done


@asynccontextmanager
async def _started(
    settings: Settings, client: AIOKafkaConsumer | AIOKafkaProducer
) -> AsyncIterator[None]:
    """``client`` started (a broker that does not answer is a sentence), stopped after."""
    try:
        await client.start()
    except KafkaError as exc:
        await client.stop()
        raise await unreachable(settings, exc) from exc
    try:
        yield
    finally:
        await client.stop()
