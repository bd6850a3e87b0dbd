"""A command route's plainly valid requests answered without FastAPI's per-request machinery.

FastAPI resolves a route's parameters per request through generic code (the key guard and
its bearer scheme, the bus, the Idempotency-Key header, the body model): under `wrk` that
was about 45% of the CPU time of a POST /orders. A :class:`FastCommandRoute` first tries the
route's ``fast`` function, which does the same work directly for a request that needs none
of FastAPI's error answers — a JSON content type, a key this process has verified before
and that has the ``commands`` scope, a short Idempotency-Key, a body the strict reader and
the request model accept, a token in the caller's bucket. Any other request goes, with its
body already read and kept, to the FastAPI route, which answers it exactly as it always
did: every 4xx and its sentence still come from one place (tests/unit/test_fastpath.py
holds both paths to the same answers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from pydantic import ValidationError

from services.api.auth import ANONYMOUS, Access
from services.api.body import NotJson, StrictJsonRequest, StrictJsonRoute

IDEMPOTENCY_KEY_MAX = 200
"""The Idempotency-Key header's ``max_length`` on the command routes."""

Fast = Callable[[StrictJsonRequest], Awaitable[Response | None]]
"""A route's fast path: its response, or None to hand the request to the FastAPI route."""


class FastCommandRoute(StrictJsonRoute):
    """A command route whose endpoint carries a ``fast`` attribute (see :func:`fast_path`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        endpoint = self.endpoint
        if getattr(endpoint, "fast", None) is None:
            return handler

        async def fast_first(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            fast: Fast = endpoint.fast  # type: ignore[attr-defined]  # looked up now: tests swap it
            response = await fast(strict)
            # The FastAPI route reads the body this request object has cached.
            return response if response is not None else await handler(strict)

        return fast_first


def fast_path(fast: Fast) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach ``fast`` to a route's endpoint (used by :class:`FastCommandRoute`)."""

    def attach(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        endpoint.fast = fast  # type: ignore[attr-defined]
        return endpoint

    return attach


def plain_json(request: Request) -> bool:
    return request.headers.get("content-type") == "application/json"


def commands_caller(request: Request) -> str | None:
    """The caller (key id, or anonymous when auth is off) of a request whose key this process
    verified before and which has the ``commands`` scope; None for anything else (no key, a
    new key still to be checked with scrypt, a missing scope): the guard answers those."""
    access: Access = request.app.state.access
    if access.keyring is None:
        return ANONYMOUS
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    stored = access.keyring.recognise(credentials.strip())
    if stored is None or "commands" not in stored.scopes:
        return None
    return stored.key_id


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


def spend(request: Request, caller: str) -> bool:
    """Spend a token of the caller's bucket; False (nothing spent) when it is empty."""
    access: Access = request.app.state.access
    return access.buckets is None or access.buckets.take(caller) == 0.0


def validated(model: Any, value: Any) -> Any | None:
    try:
        return model.model_validate(value)
    except ValidationError:
        return None
