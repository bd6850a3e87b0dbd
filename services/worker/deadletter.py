"""Dead letters: a record that cannot be processed is parked with its reason, never dropped."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class DeadLetter:
    source_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    stage: str
    """Which component gave up: an agent's name, ``projector``, ``rebuild``."""

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "source_topic": self.source_topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": _text(self.key),
            "value": _text(self.value),
            "reason": self.reason,
            "stage": self.stage,
            "dead_lettered_at": datetime.now(UTC).isoformat(),
        }
        return json.dumps(body).encode()

    @classmethod
    def of(cls, record: Any, reason: str, stage: str) -> DeadLetter:
        """For a consumed record: anything with topic, partition, offset, key and value."""
        return cls(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            reason=reason,
            stage=stage,
        )

    @staticmethod
    def decode(raw: bytes) -> dict[str, Any]:
        return dict(json.loads(raw))


def _text(raw: bytes | None) -> str | None:
    """The bytes as text when they are UTF-8, else base64 with a ``base64:`` prefix."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()
