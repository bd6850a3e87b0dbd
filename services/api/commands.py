"""Turning an accepted request into a command envelope, with idempotency keys."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import HTTPException, Response
from pydantic import BaseModel, Field

from sagas.ids import derive_id
from sagas.messages import Envelope, Message
from services.bus import CommandBus, Position


class Accepted(BaseModel):
    """A 202 body: the command is on Kafka; its effects show in the read models soon."""

    consistency_token: str = Field(
        description="Pass it back as ?consistency_token= (or X-Consistency-Token) to a GET: "
        "the GET then waits until the projector has applied the first event this command "
        "caused (the order exists, the stock is set...), so it never shows a model older "
        "than this write. Tokens are kept for SAGALINE_RECEIPT_RETENTION_H hours."
    )


def accepted(model: type[Accepted], **fields: Any) -> Response:
    """The 202 of a command route, serialized once.

    Returned as a model, FastAPI would validate it again against the ``response_model``
    (every field, though the route just derived the ids itself) before serializing it.
    ``model_construct`` fills the defaults (``status``) without validating; the route's
    ``response_model`` still documents the body, and tests/unit/test_accepted_body.py keeps
    the two byte-for-byte equal."""
    body = model.model_construct(**fields).model_dump_json()
    return Response(body, status_code=202, media_type="application/json")


def new_entity_id(scope: str, idempotency_key: str | None) -> str:
    """The seed of a command's ids (services.api.idempotency.Ids): the id of the entity it
    creates (an order), from which its command id derives. Stable under one Idempotency-Key
    in one scope (the API's scopes start with the caller's namespace), random without one."""
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
