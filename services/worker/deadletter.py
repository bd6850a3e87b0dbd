"""Dead letters: a record that cannot be processed is parked with its reason, never dropped.

A letter must always fit in one produce request, whatever the record it parks: a letter the
broker refuses (``MessageSizeTooLargeError``) would fail the batch that carries it, and the
stream would stop on the very record it was meant to step over. So the original key and
value are carried inline only while their JSON form stays under ``inline_max_bytes``;
beyond that the letter names them by size and SHA-256 digest, and the record itself stays
readable in its source topic at the partition and offset the letter gives.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sagas.untrusted import JsonRefused, bounded, read_json

DEFAULT_INLINE_MAX_BYTES = 256 * 1024
"""Two parts this large (key and value), base64 or JSON escapes included, plus the rest of
the letter stay well under a producer's 1 MB max request size."""
MAX_REASON_LENGTH = 1000
MAX_LETTER_KEY_BYTES = 1024
"""A longer original key is replaced, as the letter's Kafka key, by its digest."""


@dataclass(frozen=True)
class DeadLetter:
    source_topic: str
    partition: int
    offset: int
    record_key: bytes | None
    value: bytes | None
    reason: str
    stage: str
    """Which component gave up: an agent's name, ``projector``, ``rebuild``."""
    inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    headers: tuple[tuple[str, bytes], ...] | None = None
    """The letter's Kafka headers: the trace context of the step that gave up (tracing on)."""

    @property
    def key(self) -> bytes | None:
        """The letter's own Kafka key: the record's key, or its digest when that is long."""
        if self.record_key is None or len(self.record_key) <= MAX_LETTER_KEY_BYTES:
            return self.record_key
        return b"sha256:" + hashlib.sha256(self.record_key).hexdigest().encode()

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "source_topic": self.source_topic,
            "partition": self.partition,
            "offset": self.offset,
            **self._part("key", self.record_key),
            **self._part("value", self.value),
            "reason": bounded(self.reason, MAX_REASON_LENGTH),
            "stage": self.stage,
            "dead_lettered_at": datetime.now(UTC).isoformat(),
        }
        return json.dumps(body).encode()

    def _part(self, name: str, raw: bytes | None) -> dict[str, Any]:
        """``name`` inline (text, or base64 with a ``base64:`` prefix) when its JSON form fits,
        else null with ``<name>_inline: false``; size and digest whenever there is one."""
        if raw is None:
            return {name: None}
        described = {
            f"{name}_size": len(raw),
            f"{name}_sha256": hashlib.sha256(raw).hexdigest(),
        }
        # Measure before encoding: base64 adds a third, JSON escapes up to six times.
        if len(raw) > self.inline_max_bytes:
            return {name: None, f"{name}_inline": False, **described}
        text = _text(raw)
        if len(json.dumps(text)) > self.inline_max_bytes:
            return {name: None, f"{name}_inline": False, **described}
        return {name: text, f"{name}_inline": True, **described}

    @classmethod
    def of(
        cls,
        record: Any,
        reason: str,
        stage: str,
        inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
    ) -> DeadLetter:
        """For a consumed record: anything with topic, partition, offset, key and value."""
        return cls(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            record_key=record.key,
            value=record.value,
            reason=reason,
            stage=stage,
            inline_max_bytes=inline_max_bytes,
        )

    @staticmethod
    def decode(raw: bytes) -> dict[str, Any]:
        """A letter read back (from a topic anyone with access may write to): through the
        reader of untrusted bytes; raises :class:`JsonRefused` for what is not an object."""
        letter = read_json(raw)
        if not isinstance(letter, dict):
            raise JsonRefused("a dead letter is a JSON object")
        return letter


def _text(raw: bytes) -> str:
    """The bytes as text when they are UTF-8, else base64 with a ``base64:`` prefix."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()
