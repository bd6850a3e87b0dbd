"""Poison records: what each kind looks like, and what must become of it.

Each is written to an explicit partition of a command topic or the event topic, and the
harness remembers where it landed (topic, partition, offset): a dead letter must name
exactly such a place, and a record expected to be dead-lettered must be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runtime.topics import EVENTS, INVENTORY, ORDER_SAGA, PAYMENT

POISON_KINDS = (
    "not-utf8",
    "not-json",
    "deep-brackets",
    "wrong-shape",
    "unknown-type",
    "future-version",
    "null-value",
    "null-key",
    "key-mismatch",
    "huge",
)
POISON_CHANNELS = (ORDER_SAGA, INVENTORY, PAYMENT, EVENTS)
HUGE_BYTES = 1_000_000

Expect = Literal["dead-letter", "skip"]
"""``skip``: a record an agent may pass over without a dead letter (no poison kind needs it
today: even a well-formed event of an unknown type is dead-lettered by the projector)."""


@dataclass(frozen=True)
class PoisonRecord:
    kind: str
    channel: str
    topic: str
    partition: int
    offset: int
    expect: Expect


# A real command or event per channel: a poison that is wrong only in one respect carries it.
_REAL_TYPE = {
    ORDER_SAGA: ("order.Cancel", {"reason": "probe"}),
    INVENTORY: ("ledger.Cancel", {"reservation_id": "probe"}),
    PAYMENT: ("payment.Void", {}),
    EVENTS: ("order.StatusChanged", {"status": "CANCELLED", "reason": "probe"}),
}


def _envelope(channel: str, key: str, type_: str, payload: dict[str, Any], **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "message_id": f"probe-{key}",
        "type": type_,
        "key": key,
        "occurred_at": datetime.now(UTC).isoformat(),
        "payload": payload,
    }
    if channel == EVENTS and "entity_type" not in extra:
        entity = key.split(":", 1)[0] if ":" in key else "probe"
        body |= {"entity_type": entity, "sequence": 1, "saga_id": None}
    body |= extra
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


def build(kind: str, channel: str, n: int) -> tuple[bytes | None, bytes | None, Expect]:
    """(key, value, expectation) of poison record number ``n`` of ``kind`` on ``channel``."""
    entity = f"order:probe-{n}" if channel == EVENTS else f"probe-{n}"
    key = entity.encode()
    real_type, real_payload = _REAL_TYPE[channel]
    match kind:
        case "not-utf8":
            return key, b"\xff\xfe\xfd not utf-8 \xc3\x28", "dead-letter"
        case "not-json":
            return key, b"{this is not json", "dead-letter"
        case "deep-brackets":
            return key, b"[" * 100_000, "dead-letter"
        case "wrong-shape":
            return key, json.dumps({"order": n, "hello": ["world"]}).encode(), "dead-letter"
        case "unknown-type":
            if channel == EVENTS:
                # A well-formed event from a newer producer: applied as skipped (its sequence
                # counts) and dead-lettered, so it is visible until the projector is upgraded.
                probe = f"probe:{n}"
                value = _envelope(channel, probe, "faults.Unknown", {"n": n})
                return probe.encode(), value, "dead-letter"
            return key, _envelope(channel, entity, "faults.Unknown", {"n": n}), "dead-letter"
        case "future-version":
            value = _envelope(channel, entity, real_type, real_payload, schema_version=2)
            return key, value, "dead-letter"
        case "null-value":
            return key, None, "dead-letter"
        case "null-key":
            value = _envelope(channel, entity, "faults.Unknown", {"n": n}, entity_type=None)
            return None, value, "dead-letter"
        case "key-mismatch":
            other = f"order:probe-other-{n}" if channel == EVENTS else f"probe-other-{n}"
            return (
                other.encode(),
                _envelope(channel, entity, real_type, real_payload),
                "dead-letter",
            )
        case "huge":
            blob = "x" * HUGE_BYTES
            # A real type whose payload breaks its contract: dead-lettered on every topic, and
            # the dead letter (which carries the original bytes) is itself ~1 MB.
            return key, _envelope(channel, entity, real_type, {"blob": blob}), "dead-letter"
    raise ValueError(f"unknown poison kind {kind!r}")
