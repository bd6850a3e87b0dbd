"""Dependencies and request rules shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request
from pydantic import BaseModel

from runtime.settings import Settings
from services.api.auth import caller_of
from services.api.idempotency import Ids, Remembered
from services.bus import CommandBus

IDEMPOTENCY_KEY_MAX = 200
"""The Idempotency-Key header's ``max_length`` (the fast path checks the same)."""

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=IDEMPOTENCY_KEY_MAX,
        description="A retry with the same key and the same body gets the same answer and "
        "takes effect once; the same key with another body is refused (422). Keys are the "
        "calling API key's own: another API key's use of the same one is another request",
    ),
]


# Both are ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a
# thread hop per request (about 5% of POST /orders under load) for a dictionary lookup.
async def get_bus(request: Request) -> CommandBus:
    bus: CommandBus = request.app.state.bus
    return bus


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


BusDep = Annotated[CommandBus, Depends(get_bus)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]


def claim(request: Request, route: str, key: str | None, body: BaseModel | None) -> Ids:
    """The ids of a command request to ``route`` (a name, with the id in the path if any)
    from its caller and Idempotency-Key; 422 when the caller sent the key with another body
    (services.api.idempotency)."""
    remembered: Remembered = request.app.state.idempotency
    return remembered.claim(caller_of(request).namespace, route, key, body)
