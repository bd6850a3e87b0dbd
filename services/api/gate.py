"""The key gate: every keyed route's API key is checked before anything reads its body.

FastAPI reads and parses a request's body before it solves the route's dependencies, so a
key checked there lets anyone without a key make the API parse up to
SAGALINE_API_MAX_BODY_BYTES of hostile JSON. :class:`KeyGate`, a pure ASGI middleware,
matches the request against the routes of every keyed router, with the scope each router
was included with (services.api.auth.include: stated once), and answers 401, 403 or 429
from the headers alone; only an admitted request goes on, with its
:class:`~services.api.auth.Caller` in the ASGI scope. A request no keyed route fully
matches (``/healthz``, the console, a 404 or 405) goes on untouched: no keyed path is also
an open route's, so the router hands a matched request to that same route.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.auth import CALLER, Access, admit
from services.api.errors import error_response


class KeyGate:
    """Installed inside the body limit and the request metrics (its refusals are counted
    under the route's template) and outside the fast lane (which only sees admitted
    requests)."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._routes: list[tuple[BaseRoute, str]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self._keyed_route(scope) if scope["type"] == "http" else None
        if matched is None:
            await self.app(scope, receive, send)
            return
        route, needed = matched
        # The route's template, not the path sent: nothing the client wrote is echoed.
        name = f"{scope['method']} {getattr(route, 'path', 'this route')}"
        try:
            caller = await admit(self.api.state.access, HTTPConnection(scope), name, needed)
        except HTTPException as refused:
            scope["route"] = route  # counted under the route's template, as the router would
            headers = dict(refused.headers or {})
            answer = error_response(refused.status_code, str(refused.detail), headers=headers)
            await answer(scope, receive, send)
            return
        scope[CALLER] = caller
        await self.app(scope, receive, send)

    def _keyed_route(self, scope: Scope) -> tuple[BaseRoute, str] | None:
        """The keyed route the request fully matches, and the scope it needs."""
        for route, needed in self._keyed_routes():
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return route, needed
        return None

    def _keyed_routes(self) -> list[tuple[BaseRoute, str]]:
        """Read at the first request, once every router is included."""
        if self._routes is None:
            access: Access = self.api.state.access
            self._routes = [
                (route, scope) for router, scope in access.routers for route in router.routes
            ]
        return self._routes
