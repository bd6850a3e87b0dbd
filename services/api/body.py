"""Request bodies the API never chokes on: a size limit before anything is read, and a JSON
reader that answers 400 with a sentence for whatever is not plain, finite, shallow JSON.

FastAPI on its own answers an invalid UTF-8 body or a deeply nested one with a bare 400
("There was an error parsing the body"), reads a body of any size into memory, and lets
``NaN``/``Infinity`` through to the models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagas.untrusted import MAX_DEPTH, nesting_depth, too_deep
from services.api.errors import clip, error_response


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
    a non-finite or oversized number)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJson(f"it is not UTF-8 (byte {exc.start} is invalid)") from exc
    if too_deep(text):
        depth = nesting_depth(text)
        raise NotJson(f"it nests arrays and objects {depth} deep, more than {MAX_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise NotJson(f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except ValueError as exc:  # an integer with more digits than Python converts
        raise NotJson(clip(str(exc))) from exc
    except RecursionError as exc:  # nesting_depth bounds the depth; this is a backstop
        raise NotJson("it nests too deep") from exc
    _no_lone_surrogates(value)
    return value


def _no_lone_surrogates(value: Any) -> None:
    """``"\\ud800"`` is valid JSON but no character: it could not be written to Kafka as
    UTF-8 (RFC 7493, I-JSON, forbids it). The recursion is bounded by MAX_DEPTH."""
    if isinstance(value, dict):
        for key, item in value.items():
            _no_lone_surrogates(key)
            _no_lone_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _no_lone_surrogates(item)
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(value[exc.start])
            raise NotJson(f"a string holds \\u{code:04x}: a lone surrogate, no character") from exc


def _no_constant(name: str) -> Any:
    raise NotJson(f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise NotJson(f"the number {clip(literal, 40)} is too large")
    return value


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
