"""Who may call which route: an API key with the route's scope (services.keys), checked
before anything reads the request's body (services.api.gate).

A router's scope is stated once, where the app includes it with :func:`include`: the gate
reads it from there (``Access.routers``), and the OpenAPI document declares the ``ApiKey``
bearer scheme on each of its routes (``/healthz`` and the console, included otherwise,
stay open to the gate). No key, or a key this API does not know: 401 with
``WWW-Authenticate``; a known key without the scope: 403. Both say what is needed, and
neither repeats what the client sent. Command routes then spend a token of the key's
bucket (services.api.ratelimit) when a rate is set: 429 with ``Retry-After`` once it is
empty. A key this process has not verified before costs an scrypt run, throttled per
address and in number (services.api.keychecks).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from runtime.settings import Settings
from services.api.idempotency import idempotency_namespace
from services.api.keychecks import MAX_ADDRESSES, KeyChecks
from services.api.ratelimit import TokenBuckets, retry_after
from services.keys import SCOPES, Keyring, StoredKey, well_formed

log = logging.getLogger(__name__)

CHALLENGE = 'Bearer realm="sagaline"'
ANONYMOUS = "anonymous"
"""The caller's name (and rate bucket) when auth is off."""
CALLER = "sagaline.caller"
"""Where the gate leaves the :class:`Caller` in a request's ASGI scope."""

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
    namespace: str = field(repr=False)
    """What the caller's idempotent ids derive from (services.api.idempotency)."""


ANONYMOUS_CALLER = Caller(ANONYMOUS, frozenset(SCOPES), ANONYMOUS)


@dataclass
class Access:
    """What the gate consults, kept on ``app.state.access``."""

    keyring: Keyring | None
    """None: auth is off."""
    buckets: TokenBuckets | None
    """None: no rate limit."""
    checks: KeyChecks
    routers: list[tuple[APIRouter, str]] = field(default_factory=list)
    """Every keyed router and the scope its routes need (:func:`include`)."""


def access_for(settings: Settings) -> Access:
    keyring = Keyring(settings.api_keys_file, settings.api_keys) if settings.api_auth else None
    buckets = None
    if settings.api_rate_per_s > 0:
        buckets = TokenBuckets(settings.api_rate_per_s, settings.api_rate_burst)
    failures = TokenBuckets(
        settings.api_key_failures_per_s,
        settings.api_key_failures_burst,
        max_callers=MAX_ADDRESSES,
    )
    return Access(keyring, buckets, KeyChecks(failures, settings.api_key_checks_at_once))


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


# --- the scope of a route, stated once per router ---------------------------------------


def include(app: FastAPI, router: APIRouter, scope: str, **options: Any) -> None:
    """Include ``router``, every route of it needing ``scope``: the gate checks it, and the
    OpenAPI document declares the bearer scheme on each (when auth is on)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    settings: Settings = app.state.settings
    declared = [Depends(_declared(scope))] if settings.api_auth else []
    app.include_router(router, dependencies=declared, **options)
    access: Access = app.state.access
    access.routers.append((router, scope))


def _declared(scope: str) -> Callable[..., Awaitable[Caller]]:
    # ``credentials`` only declares the bearer scheme in the OpenAPI document: the gate
    # checked the key before the route was reached (and without the gate this fails).
    async def declared(request: Request, credentials: Credentials) -> Caller:
        return caller_of(request)

    declared.__name__ = f"requires_{scope}_scope"
    return declared


def caller_of(request: HTTPConnection) -> Caller:
    """The caller the gate admitted; a route the gate did not see fails closed (500)."""
    caller = request.scope.get(CALLER)
    if not isinstance(caller, Caller):
        raise RuntimeError("a keyed route was reached without the key gate (services.api.gate)")
    return caller


# --- the check ---------------------------------------------------------------------------


async def admit(access: Access, connection: HTTPConnection, route: str, needed: str) -> Caller:
    """The caller of a request to ``route`` (its method and template), which needs the
    scope ``needed``; an HTTPException (401, 403, 429) when it may not pass. Reads the
    headers only."""
    caller = (
        ANONYMOUS_CALLER
        if access.keyring is None
        else await _keyed_caller(access, access.keyring, connection, route, needed)
    )
    if needed == "commands":
        _spend(access.buckets, caller.key_id)
    return caller


async def _keyed_caller(
    access: Access, keyring: Keyring, connection: HTTPConnection, route: str, needed: str
) -> Caller:
    presented = bearer_credentials(connection.headers.get("authorization"))
    if presented is None:
        raise _unauthorized(
            f"{route} needs an API key with the '{needed}' scope, sent as "
            "'Authorization: Bearer <key>'"
        )
    # A key verified before is recognised on the loop; only a new one costs scrypt (a thread).
    stored: StoredKey | None = keyring.recognise(presented)
    if stored is None and well_formed(presented):
        address = connection.client.host if connection.client else "unknown"
        stored = await access.checks.verify(keyring, presented, address)
    if stored is None:
        raise _unauthorized(
            "the API key is not valid here (unknown, revoked or mistyped); "
            f"{route} needs a key with the '{needed}' scope"
        )
    if needed not in stored.scopes:
        raise HTTPException(
            403,
            f"API key {stored.key_id} has the scope(s) {', '.join(sorted(stored.scopes))}; "
            f"{route} needs the '{needed}' scope",
        )
    return Caller(stored.key_id, stored.scopes, idempotency_namespace(presented))


def bearer_credentials(authorization: str | None) -> str | None:
    """What ``Authorization: Bearer <credentials>`` carries, as FastAPI's HTTPBearer reads
    it (the scheme in any case); None for no header or another scheme."""
    scheme, _, credentials = (authorization or "").partition(" ")
    credentials = credentials.strip()
    if not scheme or not credentials or scheme.lower() != "bearer":
        return None
    return credentials


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


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": CHALLENGE})
