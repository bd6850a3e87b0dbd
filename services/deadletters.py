"""Dead letters for the people who run Sagaline: a page of them, one by its offset, and a
re-drive. ``sagaline deadletters`` and the console's dead-letter page both go through here.

Nothing reads the dead-letter topic whole (30 days of letters of up to ~0.5 MB): a page is
the ``size`` offsets just before ``before``, each letter trimmed as it is read and parsed by
the one reader of untrusted bytes (``sagas.untrusted.read_json``); one letter is read by its
offset; of the re-drive topic only the records of the letters asked about are kept.

A re-drive sends the letter's ORIGINAL record (same key, same bytes, so the same message id:
a record processed after all is dropped as a duplicate) back to its source topic and
partition, only to Sagaline's process channels (:func:`redrive_topics`). Inline or fetched
from its source offset, the record's SHA-256 must match the letter's, so nothing but the
parked record is ever sent. Each re-drive is recorded on ``REDRIVES`` keyed by the letter's
source position, and a second one is refused unless forced.

The broker is reached through a :class:`Desk`, so tests pass one that counts what it is
asked for.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Collection
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from runtime import tracing
from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, REDRIVES
from sagas.catalog import CHANNELS
from sagas.contracts.deadletters import DeadLetterBody, RedriveRecord
from sagas.untrusted import JsonRefused, read_json

FETCH_BYTES = 1024 * 1024
"""Most bytes one fetch brings (a letter larger than this still comes, alone: Kafka returns
at least one batch)."""
SEND_BYTES = 2 * 1024 * 1024
"""Most bytes one re-sent record may have (a parked record is at most ~0.5 MB)."""
PREVIEW_CHARS = 200
"""How much of a letter's key and value a page shows."""
FIELD_CHARS = 1000
"""Any other text field of a listed letter is cut to this (a letter's reason is at most
1000 characters when Sagaline wrote it; anything may be on the topic)."""
NAMING = ("source_topic", "partition", "offset", "value_sha256")
"""The fields of a letter that name its record: what a re-drive needs."""
Record = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of one record."""


class RedriveRefused(RuntimeError):
    """A letter that cannot be re-driven (now): the message says why."""


class NoLetter(RedriveRefused):
    """No letter at that offset (never written, or deleted by retention)."""


class ForeignTopic(RedriveRefused):
    """The letter's record is on a topic that is no process channel."""


@dataclass(frozen=True)
class Letter:
    """A dead letter as read back: where it sits on the dead-letter topic, and its body."""

    letter_offset: int
    body: dict[str, Any]

    @property
    def named(self) -> bool:
        """It says where its record is and what its digest is (a letter of another shape,
        or a record that is no letter, cannot be re-driven)."""
        return all(field in self.body for field in NAMING)

    @property
    def source(self) -> str:
        """The letter's source position, ``topic:partition:offset``: what names the record."""
        return f"{self.body['source_topic']}:{self.body['partition']}:{self.body['offset']}"


@dataclass(frozen=True)
class Redrive:
    """What was sent where, for one re-drive."""

    source: str
    partition: int
    offset: int
    """Where the re-sent record landed."""
    forced: bool
    redriven_at: str


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


class LetterLog(Protocol):
    """A topic's partition, read by offsets."""

    async def bounds(self) -> tuple[int, int]:
        """(the first offset still kept, the offset the next record will get)."""
        ...

    def records(self, start: int, stop: int) -> AsyncIterator[Record]:
        """The records at offsets ``start`` (included) to ``stop`` (excluded), in order."""
        ...


class Desk(Protocol):
    """The broker, as dead letters need it: :class:`DeadLetterDesk`, or a test's fake."""

    def log(self, topic: str) -> AbstractAsyncContextManager[LetterLog]:
        """Partition 0 of ``topic`` (the dead-letter and re-drive topics have one)."""
        ...

    async def resend(self, letter: Letter, forced: bool) -> Redrive:
        """Send the letter's record back (:func:`original_record`) and record it."""
        ...


# --- reading ---------------------------------------------------------------------------


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
    """The whole letter at ``letter_offset``; None when there is none."""
    found = await _record_at(log, letter_offset)
    return None if found is None else Letter(letter_offset, _body(found[2]))


async def redrives_of(log: LetterLog, sources: Collection[str]) -> dict[str, dict[str, Any]]:
    """The last re-drive of each of ``sources`` (letters' source positions) on the re-drive
    topic: read whole (compacted, small records), keeping only the records of ``sources``."""
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


async def letter_page(
    desk: Desk, settings: Settings, before: int | None, size: int
) -> tuple[LetterPage, dict[str, dict[str, Any]]]:
    """A page of letters (:func:`read_page`), and the last re-drive of those re-driven."""
    async with desk.log(settings.topic(DEAD_LETTERS)) as dead:
        page = await read_page(dead, before, size)
    named = [letter.source for letter in page.letters if letter.named]
    return page, await _redrives(desk, settings, named)


async def one_letter(
    desk: Desk, settings: Settings, letter_offset: int
) -> tuple[Letter, dict[str, Any] | None]:
    """The whole letter at ``letter_offset`` and its last re-drive (None while parked);
    :class:`NoLetter` when there is none."""
    letter = await _letter(desk, settings, letter_offset)
    if not letter.named:
        return letter, None
    return letter, (await _redrives(desk, settings, [letter.source])).get(letter.source)


def redrive_topics(settings: Settings) -> frozenset[str]:
    """Where a re-drive may send: the topics of Sagaline's process channels (the declared
    ``sagas.catalog.CHANNELS``), whose consumers drop a record they processed before. Not
    the domain-event topic (the projector skips an event it has passed by sequence), nor a
    changelog, nor anyone else's topic."""
    return frozenset(settings.topic(channel.name) for channel in CHANNELS)


def trimmed(body: dict[str, Any]) -> dict[str, Any]:
    """What a page shows of a letter: the key and value cut to a preview, other text cut
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


def _body(value: bytes | None) -> dict[str, Any]:
    """A letter's JSON object, through the one reader of untrusted bytes (linear in their
    length, nesting bounded). What is not a letter says so."""
    try:
        body = read_json(value or b"null")
    except JsonRefused as refused:
        return {"reason": f"(not a dead letter: {refused.problem})"}
    if not isinstance(body, dict):
        return {"reason": "(not a dead letter: not a JSON object)"}
    return body


async def _record_at(log: LetterLog, offset: int) -> Record | None:
    first, end = await log.bounds()
    if first <= offset < end:
        async for record in log.records(offset, offset + 1):
            if record[0] == offset:
                return record
    return None


async def _letter(desk: Desk, settings: Settings, letter_offset: int) -> Letter:
    topic = settings.topic(DEAD_LETTERS)
    async with desk.log(topic) as dead:
        letter = await read_letter(dead, letter_offset)
    if letter is None:
        raise NoLetter(
            f"no dead letter at offset {letter_offset} of {topic} (never written, or "
            "deleted by retention)"
        )
    return letter


async def _redrives(
    desk: Desk, settings: Settings, sources: Collection[str]
) -> dict[str, dict[str, Any]]:
    async with desk.log(settings.topic(REDRIVES)) as redriven:
        return await redrives_of(redriven, sources)


# --- re-driving ------------------------------------------------------------------------


async def redrive(desk: Desk, settings: Settings, letter_offset: int, *, force: bool) -> Redrive:
    """Re-send the original record of the letter at ``letter_offset`` to its source topic
    and partition, a process channel only, once unless forced; :class:`RedriveRefused`
    (:class:`NoLetter`, :class:`ForeignTopic`) says why not."""
    letter = await _letter(desk, settings, letter_offset)
    if not letter.named:
        raise RedriveRefused(f"letter {letter_offset} names no record to re-send")
    allowed = redrive_topics(settings)
    target = str(letter.body["source_topic"])
    if target not in allowed:
        raise ForeignTopic(
            f"letter {letter_offset} came from {target[:200]}, which is not one of Sagaline's "
            f"process channels; a re-drive sends only to those ({', '.join(sorted(allowed))})"
        )
    before = (await _redrives(desk, settings, [letter.source])).get(letter.source)
    if before is not None and not force:
        raise RedriveRefused(
            f"letter {letter_offset} ({letter.source}) was re-driven at "
            f"{before.get('redriven_at')} (to offset {before.get('offset')}); --force sends "
            "it again"
        )
    return await desk.resend(letter, forced=before is not None)


def redrive_record(letter_offset: int, done: Redrive) -> bytes:
    """The value recorded on the re-drive topic (its contract: ``RedriveRecord``)."""
    record = RedriveRecord(
        letter_offset=letter_offset,
        partition=done.partition,
        offset=done.offset,
        forced=done.forced,
        redriven_at=datetime.fromisoformat(done.redriven_at),
    )
    return record.model_dump_json().encode()


async def original_record(settings: Settings, letter: Letter) -> tuple[bytes | None, bytes]:
    """The parked record's key and value, checked against the letter's digests."""
    body = letter.body
    if not letter.named:
        raise RedriveRefused(f"letter {letter.letter_offset} names no record to re-send")
    if _carried(body, "key") and _carried(body, "value"):
        key, value = _inline(body, "key"), _inline(body, "value")
    else:
        key, value = await _fetch(settings, letter)
    if key is not None and body.get("key_sha256") != _digest(key):
        raise RedriveRefused(f"letter {letter.letter_offset}: the key's SHA-256 differs")
    if value is None or body.get("value_sha256") != _digest(value):
        raise RedriveRefused(
            f"letter {letter.letter_offset}: the record found has another SHA-256 than the "
            "letter's; nothing was sent"
        )
    return key, value


def _carried(body: dict[str, Any], part: str) -> bool:
    """The letter holds this part: inline, or it was none (a record without a key)."""
    return bool(body.get(f"{part}_inline")) or f"{part}_size" not in body


def _inline(body: dict[str, Any], part: str) -> bytes | None:
    text = body.get(part)
    if text is None:
        return None
    text = str(text)
    if text.startswith("base64:"):
        # An inline part that is not UTF-8 is base64; one that is UTF-8 and starts with
        # "base64:" is ambiguous, so the digest decides which reading is the record.
        try:
            decoded = base64.b64decode(text.removeprefix("base64:"), validate=True)
        except ValueError:  # binascii.Error: it was text after all
            decoded = b""
        if decoded and _digest(decoded) == body.get(f"{part}_sha256"):
            return decoded
    return text.encode()


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


async def _fetch(settings: Settings, letter: Letter) -> tuple[bytes | None, bytes | None]:
    """The record at the letter's source position, read from its topic."""
    topic, partition, offset = (
        str(letter.body["source_topic"]),
        int(letter.body["partition"]),
        int(letter.body["offset"]),
    )
    async with DeadLetterDesk(settings).log(topic, partition) as log:
        first, _end = await log.bounds()
        if offset < first:
            raise RedriveRefused(
                f"{topic}[{partition}] offset {offset} is gone (retention deleted it; the "
                f"partition starts at {first}): the letter did not carry the record inline"
            )
        found = await _record_at(log, offset)
    if found is None:
        raise RedriveRefused(f"{topic}[{partition}] has no record at offset {offset}")
    return found[1], found[2]


# --- the broker ------------------------------------------------------------------------


class KafkaLog:
    """:class:`LetterLog` over a partition of a topic, through a started consumer."""

    def __init__(self, consumer: AIOKafkaConsumer, topic: str, partition: int = 0) -> None:
        self.consumer = consumer
        self.tp = TopicPartition(topic, partition)
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
    """:class:`Desk` on the broker: a topic read by offsets through a consumer whose fetches
    are bounded, a letter's record re-sent by an idempotent producer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @asynccontextmanager
    async def log(self, topic: str, partition: int = 0) -> AsyncIterator[LetterLog]:
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self.settings),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=FETCH_BYTES,
            fetch_max_bytes=FETCH_BYTES,
        )
        async with self._started(consumer):
            yield KafkaLog(consumer, topic, partition)

    async def resend(self, letter: Letter, forced: bool) -> Redrive:
        """Send the letter's original record (digests checked) to its source partition, and
        record the re-drive; :class:`RedriveRefused` says why not."""
        key, value = await original_record(self.settings, letter)
        producer = AIOKafkaProducer(
            **aiokafka_options(self.settings),
            enable_idempotence=True,
            acks="all",
            max_request_size=SEND_BYTES,
        )
        async with self._started(producer):
            meta = await _send_original(producer, letter, key, value)
            done = Redrive(
                letter.source, meta.partition, meta.offset, forced, datetime.now(UTC).isoformat()
            )
            await producer.send_and_wait(
                self.settings.topic(REDRIVES),
                redrive_record(letter.letter_offset, done),
                key=letter.source.encode(),
            )
        return done

    @asynccontextmanager
    async def _started(self, client: AIOKafkaConsumer | AIOKafkaProducer) -> AsyncIterator[None]:
        """``client`` started (a broker that does not answer is a sentence), stopped after."""
        try:
            await client.start()
        except KafkaError as exc:
            await client.stop()
            raise await unreachable(self.settings, exc) from exc
        try:
            yield
        finally:
            await client.stop()


async def _send_original(
    producer: AIOKafkaProducer, letter: Letter, key: bytes | None, value: bytes | None
) -> Any:
    """The letter's record to its source partition; with tracing on, in a send span (a child
    of the console's request or the CLI's command), whose context the record carries."""
    topic, partition = letter.body["source_topic"], int(letter.body["partition"])
    tracer = tracing.active()
    if tracer is None:
        return await producer.send_and_wait(topic, value, key=key, partition=partition)
    shown = (key or b"").decode(errors="replace")
    with tracing.sending(tracer, topic, shown) as headers:
        return await producer.send_and_wait(
            topic, value, key=key, partition=partition, headers=headers
        )
