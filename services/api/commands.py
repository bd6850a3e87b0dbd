"""Turning an accepted request into a command envelope, with idempotency keys."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from aiokafka.errors import KafkaError
from fastapi import HTTPException

from sagas.ids import derive_id
from sagas.messages import Envelope, Message
from services.bus import CommandBus, Position


def command_id(scope: str, idempotency_key: str | None) -> str:
    """The same Idempotency-Key in the same scope always names the same command."""
    if idempotency_key is None:
        return uuid.uuid4().hex
    return derive_id("idempotency", f"{scope}/{idempotency_key}")


async def dispatch(
    bus: CommandBus,
    channel: str,
    message: Message,
    *,
    key: str,
    message_id: str,
    saga_id: str | None = None,
) -> Position:
    envelope = Envelope.wrap(
        message,
        message_id=message_id,
        key=key,
        saga_id=saga_id,
        occurred_at=datetime.now(UTC),
    )
    try:
        return await bus.send(channel, envelope)
    except KafkaError as exc:
        raise HTTPException(503, f"the message broker is unavailable, retry later ({exc})") from exc
