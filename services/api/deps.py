"""Dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from runtime.settings import Settings
from services.bus import CommandBus


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
