"""A command route's plainly valid requests answered without FastAPI's per-request machinery.

FastAPI resolves a route's parameters per request through generic code (the key mark and
its bearer scheme, the bus, the Idempotency-Key header, the body model), and Starlette
passes every request through its exception and exit-stack middlewares and matches it
against every route: under `wrk` that was well over half the CPU time of a POST /orders.
:class:`FastLane`, an ASGI middleware just inside the key gate (services.api.gate: the
caller is admitted, its token spent), first tries a route's ``fast`` function (attached
with :func:`fast_path`), which does the route's work directly for a request that needs
none of FastAPI's error answers — a JSON content type, a short Idempotency-Key, a body the
strict reader and the request model accept. Any other request goes on, its body already
read and replayed, to the FastAPI route, which answers it exactly as it always did: every
4xx and its sentence still come from one place (tests/unit/test_api_fastpath.py holds both
paths to the same answers).
An exception out of a fast function (the broker down: 503) is answered by the app's own
exception handlers, as Starlette's exception middleware would.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from opentelemetry import trace
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime import tracing
from services.api.body import NotJson, StrictJsonRequest
from services.api.deps import IDEMPOTENCY_KEY_MAX

Fast = Callable[[StrictJsonRequest], Awaitable[Response | None]]
"""A route's fast path: its response, or None to hand the request to the FastAPI route."""


class FastLane:
    """Pure ASGI middleware: a POST to a route whose endpoint carries a ``fast`` function
    (see :func:`fast_path`) is first offered to that function. Installed inside the key
    gate (the caller is admitted), :class:`~services.api.body.BodyLimit` (the body it reads
    is bounded) and the request metrics (which count it under the route's template, set
    here as the router would)."""

    def __init__(self, app: ASGIApp, api: FastAPI, routers: Sequence[APIRouter]) -> None:
        self.app = app
        self.api = api
        self.routers = routers
        self._routes: dict[str, APIRoute] | None = None

    def _fast_routes(self) -> dict[str, APIRoute]:
        """Path -> route, for the routers' POST routes with a fast function and no path
        parameters; read at the first request, once every route is registered."""
        if self._routes is None:
            self._routes = {
                route.path: route
                for router in self.routers
                for route in router.routes
                if isinstance(route, APIRoute)
                and "POST" in (route.methods or ())
                and not route.param_convertors
                and hasattr(route.endpoint, "fast")
            }
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = self._fast_routes().get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = route
        if tracing.active() is not None:
            _name_request_span(route.path)
        request = StrictJsonRequest(scope, receive)
        fast: Fast = route.endpoint.fast  # type: ignore[attr-defined]  # looked up now: tests swap it
        try:
            response = await fast(request)
        except Exception as exc:
            handler = _handler_for(self.api, exc)
            if handler is None:
                raise  # the outermost 500 handler's, as for any route
            answer = handler(request, exc)
            response = await answer if inspect.isawaitable(answer) else answer
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, _replaying(getattr(request, "_body", None), receive), send)


def _name_request_span(path: str) -> None:
    """The request's span (FastAPI's) named after the route, as FastAPI names it once its
    router selects one: a fast request never reaches the router."""
    span = trace.get_current_span()
    span.update_name(f"POST {path}")
    span.set_attribute("http.route", path)


def _handler_for(api: FastAPI, exc: Exception) -> Callable[..., Any] | None:
    """The handler Starlette's exception middleware would call for ``exc``: registered for
    its class or the nearest base class, ``Exception`` excluded (the server-error
    middleware's, outside)."""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        handler = api.exception_handlers.get(cls)
        if handler is not None:
            return handler
    return None


def _replaying(body: bytes | None, receive: Receive) -> Receive:
    """``receive`` with the body a fast function already read given back first (nothing
    read: ``receive`` itself)."""
    if body is None:
        return receive
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def fast_path(fast: Fast) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach ``fast`` to a route's endpoint (used by :class:`FastCommandRoute`)."""

    def attach(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        endpoint.fast = fast  # type: ignore[attr-defined]
        return endpoint

    return attach


def plain_json(request: Request) -> bool:
    return request.headers.get("content-type") == "application/json"


def idempotency_key(request: Request) -> tuple[bool, str | None]:
    """(usable, the key): unusable when sent twice or longer than the route allows."""
    keys = request.headers.getlist("idempotency-key")
    if len(keys) > 1 or (keys and len(keys[0]) > IDEMPOTENCY_KEY_MAX):
        return False, None
    return True, keys[0] if keys else None


async def json_body(request: StrictJsonRequest) -> tuple[bool, Any]:
    """(usable, the parsed body): unusable when the strict reader refuses it."""
    try:
        return True, await request.json()
    except NotJson:
        return False, None


def validated(model: Any, value: Any) -> Any | None:
    try:
        return model.model_validate(value)
    except ValidationError:
        return None
