"""Dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from runtime.settings import Settings
from services.bus import CommandBus


def get_bus(request: Request) -> CommandBus:
    bus: CommandBus = request.app.state.bus
    return bus


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


BusDep = Annotated[CommandBus, Depends(get_bus)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
