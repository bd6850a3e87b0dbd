"""Request bodies the API never chokes on: a size limit before anything is read, and a JSON
reader that answers 400 with a sentence for whatever is not plain, finite, shallow JSON.

FastAPI on its own answers an invalid UTF-8 body or a deeply nested one with a bare 400
("There was an error parsing the body"), reads a body of any size into memory, and lets
``NaN``/``Infinity`` through to the models.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagas.untrusted import JsonRefused, read_json
from services.api.errors import error_response


class BodyTooLarge(HTTPException):
    """An HTTPException, so FastAPI's body reader lets it through to the error handlers."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"the request body is larger than this API accepts ({limit} bytes at most)"
        )


class BodyLimit:
    """Pure ASGI middleware: 413 for a body longer than ``max_bytes``, by its Content-Length
    before any byte is read, or while it streams (chunked, or a lying Content-Length) as soon
    as the count passes the limit; never more than the limit (plus one chunk) in memory."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _answer_413(self.max_bytes, scope, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            # Raised outside FastAPI's handlers (a route that streams the body itself).
            if started:
                raise
            await _answer_413(self.max_bytes, scope, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer_413(limit: int, scope: Scope, send: Send) -> None:
    response = error_response(413, BodyTooLarge(limit).detail, headers={"Connection": "close"})
    await response(scope, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


# --- the strict JSON reader -------------------------------------------------------------


class NotJson(HTTPException):
    def __init__(self, why: str) -> None:
        super().__init__(400, f"the body is not valid JSON: {why}")


def parse_json(body: bytes) -> Any:
    """The body as JSON, or :class:`NotJson` naming the problem (encoding, syntax, nesting,
    a non-finite or oversized number): the records' reader (linear in the body's length),
    with the API's wording."""
    try:
        return read_json(body)
    except JsonRefused as refused:
        raise NotJson(f"it is {refused.problem}" if refused.too_deep else refused.problem) from None


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose JSON body goes through :func:`parse_json` (FastAPI calls
    ``request.json()`` on the request this handler passes on)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            if not isinstance(request, StrictJsonRequest):
                request = StrictJsonRequest(request.scope, request.receive)
            return await handler(request)

        return strict
