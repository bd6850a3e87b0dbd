"""The FastAPI application."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from pydantic import BaseModel
from sqlalchemy import Engine

from readside.engine import DatabaseUnreachable, answering, create_read_engine
from readside.migrate import is_migrated
from runtime import tracing
from runtime.settings import Settings, get_settings
from services import logsafe
from services.api import actions as api_actions
from services.api import auth, queries
from services.api import metrics as api_metrics
from services.api.body import BodyLimit, StrictJsonRoute
from services.api.console import routes as console
from services.api.domain_routes import domain_routers
from services.api.errors import documented, install_error_handlers
from services.api.fastpath import FastLane
from services.api.freshness import ReadWatch, database_probe
from services.api.gate import KeyGate
from services.api.idempotency import Remembered
from services.api.inflight import in_flight_of
from services.bus import CommandBus
from services.projector.offsets import EndOffsets

log = logging.getLogger(__name__)


class Health(BaseModel):
    status: Literal["ok"] = "ok"


DESCRIPTION = """\
Commands start and steer sagas (each domain's under its own tags) and answer 202 at once
with a consistency token; the sagas run over Kafka. Queries read the read models the projector
keeps; pass a command's token to a query to read your own write. Every route but
`/healthz` needs an API key (`Authorization: Bearer <key>`) with the route's scope:
`commands`, `read`, or `admin` for an operator's actions. Every error answer is
`{"message", "detail"}`."""

TAGS = [
    {"name": "sagas", "description": "Every saga listed and counted; one saga's timeline"},
    {"name": "projections", "description": "The projector's progress: lag, held events"},
    {"name": "health", "description": "Liveness"},
]
"""Every tag of the app's own routes, declared once (Spectral's ``operation-tag-defined``);
each domain declares its routes' tags beside them (services.api.domain_routes)."""


def create_api(
    settings: Settings, bus: CommandBus | None = None, engine: Engine | None = None
) -> FastAPI:
    """The API. A given ``bus`` or ``engine`` is the caller's to start and stop; otherwise
    the lifespan creates them from ``settings``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            auth.announce(settings, app.state.access)
            if bus is None:
                app.state.bus = CommandBus(settings)
                await app.state.bus.start()
                stack.push_async_callback(app.state.bus.stop)
            await _open_read_side(app, settings, engine, stack)
            # Read only when /metrics or the console's overview asks, in a thread.
            app.state.in_flight = in_flight_of(settings, app.state.prometheus)
            yield

    logsafe.install()
    routers = domain_routers()  # every domain's, through its declaration
    # SAGALINE_TRACING: the SDK set up before the bus is made (its sends carry the context).
    traced = tracing.configure(settings.tracing, "api") is not None
    app = FastAPI(
        # FastAPI's own OpenTelemetry hooks: this API reports through Prometheus (/metrics);
        # off, a request skips the check for a configured provider (~5% of POST /orders).
        # With SAGALINE_TRACING its request spans are the traces' roots (they take a
        # caller's traceparent), and the commands a request sends are their children.
        telemetry=_telemetry(settings.api_opentelemetry, traced),
        title="Sagaline",
        summary="Long business transactions over Kafka as sagas, with read models.",
        description=DESCRIPTION,
        version="0.1.0",
        # Relative: the document describes the API wherever it is served (a proxy's
        # address, a port of SAGALINE_API_PORT); clients resolve it against the document's.
        servers=[{"url": "/", "description": "This API, where this document is served"}],
        openapi_tags=[*routers.tags, *TAGS, *api_actions.TAGS],
        lifespan=lifespan,
    )
    app.router.route_class = StrictJsonRoute
    app.state.settings = settings
    app.state.bus = bus
    app.state.access = auth.access_for(settings)
    app.state.idempotency = Remembered(settings.api_idempotency_keys)
    app.state.prometheus = api_metrics.ApiPrometheus()
    install_error_handlers(app)
    command_routers = routers.commands
    # Inside the key gate (only admitted requests), the body limit (what it reads is
    # bounded) and the metrics (it is counted).
    app.add_middleware(FastLane, api=app, routers=command_routers)
    # Before anything reads a body: a request without a valid key is refused unread.
    app.add_middleware(KeyGate, api=app)
    # Outermost but for Starlette's 500 handler: refuses a long body before anything reads it.
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes)
    # Outside the body limit, so its 413s are counted too.
    app.add_middleware(api_metrics.RequestMetrics, metrics=app.state.prometheus)
    # Every route can answer these; the routes document the rest (services.api.errors).
    # With keys, any keyed route may be throttled (a key it must check with scrypt).
    every_route = documented(413, 422)
    keyed = documented(401, 403, 429) if settings.api_auth else {}
    limited = documented(429) if settings.api_rate_per_s > 0 else {}
    # Each router's scope is stated here, once (the gate and the document read it).
    for router in command_routers:
        auth.include(app, router, "commands", responses=every_route | keyed | limited)
    for router in (*routers.queries, *queries.ROUTERS):
        auth.include(app, router, "read", responses=every_route | keyed)
    auth.include(app, api_metrics.router, "read")
    auth.include(app, api_actions.router, "admin", responses=every_route | keyed)
    # Guarded by its own login cookie (a browser sends no header on navigation).
    console.install(app)

    @app.get("/healthz", tags=["health"], response_model=Health, responses=documented(413))
    async def healthz() -> Health:
        """Liveness: the process answers. Kafka problems show as 503 on the commands."""
        return Health()

    app.openapi = lambda: _openapi_without_null_parameters(app)  # type: ignore[method-assign]
    return app


def create_api_from_environment() -> FastAPI:
    """The API of the environment's settings: what each process of SAGALINE_API_WORKERS > 1
    runs (uvicorn's spawned workers import it by name)."""
    from runtime import gc_tuning
    from runtime.logformat import configure

    settings = get_settings()
    configure(settings.log_level, settings.log_format)
    api = create_api(settings)
    gc_tuning.tune(settings.gc_threshold, settings.gc_freeze)
    return api


def _telemetry(enabled: bool, traced: bool) -> TelemetryConfig:
    """FastAPI's native OpenTelemetry (it does what opentelemetry-instrumentation-fastapi
    does, and steps aside if that is installed): request spans with tracing on; its metrics,
    logs and per-endpoint spans only with SAGALINE_API_OPENTELEMETRY, for a process that
    configures its own SDK."""
    return {
        "tracing": enabled or traced,
        "metrics": enabled,
        "logs": enabled,
        "operation_spans": enabled,
        # None: the global provider (what SAGALINE_API_OPENTELEMETRY alone expects).
        "tracer_provider": tracing.provider() if traced else None,
    }


def _openapi_without_null_parameters(app: FastAPI) -> dict[str, Any]:
    """FastAPI documents an optional parameter (``str | None = None``) as "a string or null";
    a query string or a header has no null (a client would send the text "null"). Optional
    is said by ``required: false``."""
    if app.openapi_schema is None:
        document = FastAPI.openapi(app)
        for operations in document["paths"].values():
            for operation in operations.values():
                for parameter in operation.get("parameters", ()):
                    schema = parameter.get("schema", {})
                    options = schema.get("anyOf")
                    if options and {"type": "null"} in options:
                        kept = [o for o in options if o != {"type": "null"}]
                        del schema["anyOf"]
                        if len(kept) == 1:
                            schema.update(kept[0])
                        else:
                            schema["anyOf"] = kept
    return app.openapi_schema  # type: ignore[return-value]


async def _open_read_side(
    app: FastAPI, settings: Settings, engine: Engine | None, stack: AsyncExitStack
) -> None:
    """The read-model engine, the one poller that wakes waiting GETs, the lag reader."""
    if engine is None:
        engine = create_read_engine(settings.database_url_with_password())
        stack.callback(engine.dispose)
    tracing.instrument_engine(engine)
    try:
        if not await asyncio.to_thread(answering, engine, is_migrated):
            log.error("the read-model schema is missing: run `sagaline db upgrade`")
    except DatabaseUnreachable as exc:
        # Commands need only the broker: the API starts, and reads answer 503 until it does.
        log.error("%s; reads answer 503 until it answers", exc)
    app.state.engine = engine
    app.state.watch = ReadWatch(database_probe(engine), settings.read_poll_ms / 1000)
    await app.state.watch.start()
    stack.push_async_callback(app.state.watch.stop)
    app.state.end_offsets = EndOffsets(settings)
    stack.push_async_callback(app.state.end_offsets.close)
