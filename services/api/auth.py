"""Who may call which route: an API key with the route's scope (services.keys).

Every router is included with :func:`guard` of its scope, a FastAPI dependency, so the
OpenAPI document declares the ``ApiKey`` bearer scheme on each route that needs it (and
``/healthz`` stays open). No key, or a key this API does not know: 401 with
``WWW-Authenticate``; a known key without the scope: 403. Both say what is needed, and
neither repeats what the client sent. Command routes also spend a token of the key's bucket
(services.api.ratelimit) when a rate is set: 429 with ``Retry-After`` once it is empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from runtime.settings import Settings
from services.api.ratelimit import TokenBuckets, retry_after
from services.keys import SCOPES, Keyring

log = logging.getLogger(__name__)

CHALLENGE = 'Bearer realm="sagaline"'
ANONYMOUS = "anonymous"
"""The caller's name (and rate bucket) when auth is off."""

bearer = HTTPBearer(
    scheme_name="ApiKey",
    bearerFormat="sgl_<id>_<secret>",
    description="An API key, sent as `Authorization: Bearer <key>`; "
    "made by `sagaline keys create --scope commands,read`",
    auto_error=False,
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a key's id (never the key), or ``anonymous`` when auth is off."""

    key_id: str
    scopes: frozenset[str]


@dataclass
class Access:
    """What the guards consult, kept on ``app.state.access``."""

    keyring: Keyring | None
    """None: auth is off."""
    buckets: TokenBuckets | None
    """None: no rate limit."""


def access_for(settings: Settings) -> Access:
    keyring = Keyring(settings.api_keys_file, settings.api_keys) if settings.api_auth else None
    buckets = None
    if settings.api_rate_per_s > 0:
        buckets = TokenBuckets(settings.api_rate_per_s, settings.api_rate_burst)
    return Access(keyring, buckets)


def announce(settings: Settings, access: Access) -> None:
    """At start: a warning when auth is off, an error when no key could ever pass."""
    if access.keyring is None:
        log.warning(
            "SAGALINE_API_AUTH is false: every route of this API is open to anyone who can "
            "reach %s:%s, without a key",
            settings.api_host,
            settings.api_port,
        )
    elif len(access.keyring) == 0:
        log.error(
            "no API keys in %s or SAGALINE_API_KEYS: every request but /healthz will be "
            "refused (401); create one with `sagaline keys create --scope commands,read`",
            settings.api_keys_file,
        )


def guard(scope: str) -> Callable[..., Awaitable[Caller]]:
    """The dependency of every route that needs ``scope``."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def check(request: Request, credentials: Credentials) -> Caller:
        access: Access = request.app.state.access
        caller = await _caller(access, credentials, scope, request)
        if scope == "commands":
            _spend(access.buckets, caller.key_id)
        return caller

    check.__name__ = f"requires_{scope}_scope"
    return check


def dependencies(settings: Settings, scope: str) -> list[Any]:
    """What ``include_router(..., dependencies=...)`` takes for a router of ``scope``."""
    if settings.api_auth:
        return [Depends(guard(scope))]
    if scope == "commands" and settings.api_rate_per_s > 0:
        return [Depends(_rate_only())]
    return []


def _rate_only() -> Callable[..., Awaitable[None]]:
    async def check(request: Request) -> None:
        _spend(request.app.state.access.buckets, ANONYMOUS)

    return check


def _spend(buckets: TokenBuckets | None, caller: str) -> None:
    if buckets is None:
        return
    wait = buckets.take(caller)
    if wait > 0:
        whose = "this key" if caller != ANONYMOUS else "all callers together"
        raise HTTPException(
            429,
            f"too many commands from {whose}: at most {buckets.rate_per_s:g} per second "
            f"(bursts of {buckets.burst}); retry after the Retry-After seconds",
            headers={"Retry-After": retry_after(wait)},
        )


async def _caller(
    access: Access, credentials: HTTPAuthorizationCredentials | None, scope: str, request: Request
) -> Caller:
    if access.keyring is None:
        return Caller(ANONYMOUS, frozenset(SCOPES))
    # The route's template, not the path sent: nothing the client wrote is echoed.
    route = f"{request.method} {getattr(request.scope.get('route'), 'path', 'this route')}"
    if credentials is None:
        raise _unauthorized(
            f"{route} needs an API key with the '{scope}' scope, sent as "
            "'Authorization: Bearer <key>'"
        )
    # A key verified before is recognised on the loop; only a new one costs scrypt (a thread).
    stored = access.keyring.recognise(credentials.credentials)
    if stored is None:
        stored = await asyncio.to_thread(access.keyring.authenticate, credentials.credentials)
    if stored is None:
        raise _unauthorized(
            "the API key is not valid here (unknown, revoked or mistyped); "
            f"{route} needs a key with the '{scope}' scope"
        )
    if scope not in stored.scopes:
        raise HTTPException(
            403,
            f"API key {stored.key_id} has the scope(s) {', '.join(sorted(stored.scopes))}; "
            f"{route} needs the '{scope}' scope",
        )
    return Caller(stored.key_id, stored.scopes)


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": CHALLENGE})
