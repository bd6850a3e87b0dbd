"""Dead letters for the people who run Sagaline: list them, show one, re-drive one.

A re-drive sends the letter's ORIGINAL record (same key, same bytes, so the same envelope
and message id) back to its source topic and partition, after the cause was fixed. The
record comes from the letter when it was carried inline, else from the source topic at the
letter's offset; either way its SHA-256 must match the letter's digest, so nothing but the
record that was parked is ever sent. Because the envelope keeps its message id, a record
the consumer had processed after all (a letter is at-least-once) is dropped as a duplicate.

Each re-drive is recorded on a small compacted topic (``REDRIVES``), keyed by the letter's
source position: a letter sent twice to the dead-letter topic is still one record to
re-drive, and a second re-drive is refused unless forced.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, REDRIVES
from sagas.contracts.deadletters import RedriveRecord


class RedriveRefused(RuntimeError):
    """A letter that cannot be re-driven (now): the message says why."""


@dataclass(frozen=True)
class Letter:
    """A dead letter as read back: where it sits on the dead-letter topic, and its body."""

    letter_offset: int
    body: dict[str, Any]

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


async def list_letters(settings: Settings) -> list[Letter]:
    """Every letter on the dead-letter topic now, oldest first."""
    records = await _read_to_end(settings, settings.topic(DEAD_LETTERS))
    letters = []
    for offset, _key, value in records:
        try:
            body = dict(json.loads(value or b"null"))
        except (ValueError, TypeError):
            body = {"reason": "(not a dead letter: unreadable JSON)"}
        letters.append(Letter(offset, body))
    return letters


async def redrives(settings: Settings) -> dict[str, dict[str, Any]]:
    """The last re-drive of every re-driven letter, by source position."""
    found: dict[str, dict[str, Any]] = {}
    for _offset, key, value in await _read_to_end(settings, settings.topic(REDRIVES)):
        if key is not None and value is not None:
            found[key.decode()] = json.loads(value)
    return found


async def find_letter(settings: Settings, letter_offset: int) -> Letter:
    for letter in await list_letters(settings):
        if letter.letter_offset == letter_offset:
            return letter
    raise RedriveRefused(
        f"no dead letter at offset {letter_offset} of {settings.topic(DEAD_LETTERS)}"
    )


async def redrive(settings: Settings, letter_offset: int, *, force: bool = False) -> Redrive:
    """Re-send the letter's original record to its source topic and partition; record it."""
    letter = await find_letter(settings, letter_offset)
    before = (await redrives(settings)).get(letter.source)
    if before is not None and not force:
        raise RedriveRefused(
            f"letter {letter_offset} ({letter.source}) was re-driven at "
            f"{before['redriven_at']} (to offset {before['offset']}); --force sends it again"
        )
    key, value = await original_record(settings, letter)
    async with _producer(settings) as producer:
        meta = await producer.send_and_wait(
            letter.body["source_topic"], value, key=key, partition=int(letter.body["partition"])
        )
        done = Redrive(
            letter.source,
            meta.partition,
            meta.offset,
            forced=before is not None,
            redriven_at=datetime.now(UTC).isoformat(),
        )
        await producer.send_and_wait(
            settings.topic(REDRIVES),
            redrive_record(letter_offset, done),
            key=letter.source.encode(),
        )
    return done


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
    if "source_topic" not in body or "value_sha256" not in body:
        raise RedriveRefused(f"letter {letter.letter_offset} names no record with a value")
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
    if text.startswith("base64:"):
        # An inline part that is not UTF-8 is base64; one that is UTF-8 and starts with
        # "base64:" is ambiguous, so the digest decides which reading is the record.
        try:
            decoded = base64.b64decode(text.removeprefix("base64:"), validate=True)
        except ValueError:  # binascii.Error: it was text after all
            decoded = b""
        if decoded and _digest(decoded) == body.get(f"{part}_sha256"):
            return decoded
    raw: bytes = text.encode()
    return raw


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


async def _fetch(settings: Settings, letter: Letter) -> tuple[bytes | None, bytes | None]:
    """The record at the letter's source position, read from its topic."""
    topic, partition, offset = (
        letter.body["source_topic"],
        int(letter.body["partition"]),
        int(letter.body["offset"]),
    )
    tp = TopicPartition(topic, partition)
    async with _consumer(settings) as consumer:
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        if offset < first:
            raise RedriveRefused(
                f"{topic}[{partition}] offset {offset} is gone (retention deleted it; the "
                f"partition starts at {first}): the letter did not carry the record inline"
            )
        consumer.seek(tp, offset)
        record = await consumer.getone()
    if record.offset != offset:
        raise RedriveRefused(f"{topic}[{partition}] has no record at offset {offset}")
    return record.key, record.value


async def _read_to_end(
    settings: Settings, topic: str
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record on a one-partition topic, up to its end now."""
    tp = TopicPartition(topic, 0)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    async with _consumer(settings) as consumer:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                out.append((record.offset, record.key, record.value))
    return out


def _consumer(settings: Settings) -> AbstractAsyncContextManager[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        **aiokafka_options(settings),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=2 * 1024 * 1024,
    )
    return _started(settings, consumer)


def _producer(settings: Settings) -> AbstractAsyncContextManager[AIOKafkaProducer]:
    producer = AIOKafkaProducer(
        **aiokafka_options(settings),
        enable_idempotence=True,
        acks="all",
        max_request_size=2 * 1024 * 1024,
    )
    return _started(settings, producer)


_Client = TypeVar("_Client", AIOKafkaConsumer, AIOKafkaProducer)


@asynccontextmanager
async def _started(settings: Settings, client: _Client) -> AsyncIterator[_Client]:
    """``client`` started (a broker that does not answer is a sentence), stopped after."""
    try:
        await client.start()
    except KafkaError as exc:
        await client.stop()
        raise await unreachable(settings, exc) from exc
    try:
        yield client
    finally:
        await client.stop()
