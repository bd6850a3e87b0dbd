"""One error body for every answer that is not a success: a sentence, and details if any.

Every handler here turns what went wrong into ``{"message": "<a sentence>", "detail": ...}``
(:class:`ErrorBody`): validation errors, unknown routes, wrong methods, bodies that are not
JSON, too large or of the wrong type, and the routes' own HTTPExceptions (404, 503, 504).
Nothing the client sent is echoed back beyond a short, truncated excerpt.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

log = logging.getLogger(__name__)

NO_NUL_PATTERN = r"^[^\u0000]*$"
"""Free text without NUL: PostgreSQL text cannot hold it, so the projector could not store
an order (or a timeline step) that had one. (services.api.requests.TEXT)"""
MAX_PROBLEMS = 20
"""A body with a thousand wrong fields gets the first few named, not a megabyte of errors."""
MAX_TEXT = 200
"""Longest piece of client-derived text (a field name, a validator's message) in an answer."""


class Problem(BaseModel):
    """One thing wrong with a request (FastAPI's validation error without its input)."""

    loc: list[str | int] = Field(description="Where: body, query, path or header, then the field")
    msg: str = Field(description="What is wrong with it")
    type: str = Field(description="A stable machine-readable kind (pydantic's error type)")


class ErrorBody(BaseModel):
    """The body of every 4xx and 5xx this API answers."""

    message: str = Field(description="What went wrong, in a sentence a person can act on")
    detail: list[Problem] | None = Field(
        None, description="For an invalid request: each wrong field (otherwise null)"
    )


def clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: a field name the client sent with a lone
    surrogate (valid in a JSON string, not in UTF-8) cannot break the answer."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(
    status: int, message: str, *, headers: dict[str, str] | None = None, detail: Any = None
) -> JSONResponse:
    body = ErrorBody(message=message, detail=detail)
    return AsciiJSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


# --- 422 (and the 400/415 FastAPI reports as validation errors) -------------------------


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        # The strict JSON reader (services.api.body) catches these first; this is a backstop.
        return error_response(400, "the body is not valid JSON")
    if _body_is_not_json(request, errors):
        media = request.headers.get("content-type")
        return error_response(
            415,
            "the body must be JSON sent with Content-Type: application/json"
            + ("" if media is None else f", not {clip(media, 60)!r}"),
        )
    problems = [_problem(e) for e in errors[:MAX_PROBLEMS]]
    more = len(errors) - len(problems)
    named = "; ".join(f"{_where(p.loc)}: {p.msg}" for p in problems)
    suffix = f"; and {more} more problem(s)" if more > 0 else ""
    return error_response(422, f"invalid request: {named}{suffix}", detail=problems)


def _body_is_not_json(request: Request, errors: list[Any]) -> bool:
    """FastAPI hands a route the raw bytes when the Content-Type is not JSON; the model then
    rejects them. That is a media-type problem (415), not a wrong field."""
    if not any(tuple(e.get("loc", ()))[:1] == ("body",) for e in errors):
        return False
    if not any(isinstance(e.get("input"), bytes | bytearray) for e in errors):
        return False
    media = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    return not (media.startswith("application/") and media.endswith("json"))


def _problem(error: Any) -> Problem:
    """Without ``input`` (may be huge) and ``ctx`` (may hold Decimals, exceptions...)."""
    loc = [p if isinstance(p, int) else clip(str(p), 60) for p in error.get("loc", ())]
    msg = str(error.get("msg", "invalid"))
    if (error.get("ctx") or {}).get("pattern") == NO_NUL_PATTERN:
        msg = "Text must not contain the NUL character (\\u0000)"
    return Problem(loc=loc, msg=clip(msg), type=str(error.get("type", "")))


def _where(loc: list[str | int]) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "body"


# --- HTTPException: the routes' own, and routing's 404 and 405 --------------------------


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        message = (
            f"{request.method} is not allowed on {clip(request.url.path, 100)}; "
            f"this resource allows {', '.join(allowed)}"
        )
    elif exc.status_code == 404 and exc.detail == "Not Found":
        message = (
            f"no route matches {request.method} {clip(request.url.path, 100)}; "
            "/docs lists the routes of this API"
        )
    elif exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        message = "the body could not be read as JSON"
    else:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code >= 500:
        log.warning("%s %s: %s %s", request.method, request.url.path, exc.status_code, message)
    return error_response(exc.status_code, message, headers=headers or None)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path. Starlette's own ``Allow`` names only
    the first route whose path matches (GET and PUT /products/{id}/stock are two routes)."""
    return [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    ]


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    """A bug: the traceback goes to the log, the client gets the one body shape (Starlette
    re-raises the exception after this, so the server logs it too)."""
    return error_response(
        500, f"the API failed on {request.method} {clip(request.url.path, 100)}; it is logged"
    )


# --- what the OpenAPI document says about them -----------------------------------------

_MEANING = {
    400: "The body is not valid JSON (syntax, UTF-8, nesting deeper than 32, NaN or Infinity)",
    401: "No API key, or one this API does not know (unknown, revoked, mistyped)",
    403: "The API key lacks the scope this route needs",
    404: "Unknown id, or no route matches (an id with a '/' in it)",
    413: "The body is longer than SAGALINE_API_MAX_BODY_BYTES",
    415: "The body is not sent as Content-Type: application/json",
    422: "A parameter or field is missing or wrong; `detail` names each",
    429: "Too many requests: commands from this key past SAGALINE_API_RATE_PER_S, keys that "
    "were not valid from this address past SAGALINE_API_KEY_FAILURES_PER_S, or new keys past "
    "SAGALINE_API_KEY_CHECKS_AT_ONCE; see Retry-After",
    503: "The message broker or the read-model database is unavailable; retry later",
    504: "The projector has not applied your write in time",
}


def documented(*statuses: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, all with the :class:`ErrorBody` model;
    ``meanings`` (``s404="..."``) replace a status's default description."""
    return {
        s: {
            "model": ErrorBody,
            "description": meanings.get(f"s{s}", _MEANING[s]),
            **({"headers": _HEADERS[s]} if s in _HEADERS else {}),
        }
        for s in statuses
    }


_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": 'How to authenticate: `Bearer realm="sagaline"`',
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before sending the request again",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}
