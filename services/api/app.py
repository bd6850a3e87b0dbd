"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

import sagas.contracts  # noqa: F401  (registers every contract)
from services.api import orders, products
from services.bus import CommandBus
from services.settings import Settings


def create_api(settings: Settings, bus: CommandBus | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if bus is not None:  # the caller owns a started bus
            yield
            return
        app.state.bus = CommandBus(settings)
        await app.state.bus.start()
        try:
            yield
        finally:
            await app.state.bus.stop()

    app = FastAPI(
        title="Sagaline",
        summary="Long business transactions over Kafka as sagas, with read models.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.bus = bus
    app.add_exception_handler(RequestValidationError, _readable_422)  # type: ignore[arg-type]
    app.include_router(orders.router)
    app.include_router(products.router)
    return app


async def _readable_422(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with one sentence a person can act on, plus FastAPI's usual details."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"] if p != "body") or "body"
        problems.append(f"{where}: {err['msg']}")
    return JSONResponse(
        status_code=422,
        content={"message": "invalid request: " + "; ".join(problems), "detail": exc.errors()},
    )
