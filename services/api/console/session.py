"""Who is using the console, and whether a form was sent by the console itself.

A browser cannot send ``Authorization`` on a navigation, so the console's login form takes
an API key, checks it once, and gives the browser a random session id in a cookie (never
the key: :mod:`services.api.console.sessions` keeps the key id and scopes beside it). The
cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page makes the
browser send it), Path=/console (the JSON API never sees it) and Secure unless the API
listens on loopback only (see :func:`secure`). Every request re-checks that the session's
key is still in the key ring with the same scopes (no scrypt: the ring is re-read when its
file changes), so a revoked key is logged out at its next click.

Every form (re-drive, logout) also carries the session's form token, and its ``Origin``
(when the browser sends one) must be this console's: a request another site forges has
neither the token nor our origin.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request
from starlette.responses import Response

from runtime.settings import Settings
from services.api.auth import ANONYMOUS, Access
from services.api.console.sessions import Session, SessionStore
from services.keys import SCOPES, Keyring, well_formed

COOKIE = "sagaline_console"
PATH = "/console"
MAX_KEY_CHARS = 200
"""Longer than any key ``sagaline keys`` makes; a longer field is not a key."""
_ANONYMOUS_SECRET = secrets.token_bytes(32)
"""With auth off there is no session to hold a form token: one derived from a secret of
this process."""


@dataclass(frozen=True)
class Visitor:
    """A logged-in console user: a key's id (never the key) and its scopes."""

    key_id: str
    scopes: frozenset[str]
    form_token: str
    """What every form of this visitor's pages carries."""

    def may(self, scope: str) -> bool:
        return scope in self.scopes


def anonymous() -> Visitor:
    """The visitor when API auth is off: every scope, a form token of this process."""
    token = hmac.new(_ANONYMOUS_SECRET, b"sagaline-console-form", hashlib.sha256).hexdigest()
    return Visitor(ANONYMOUS, frozenset(SCOPES), token)


def store(request: Request) -> SessionStore:
    sessions: SessionStore = request.app.state.console_sessions
    return sessions


async def visitor(request: Request) -> Visitor | None:
    """The visitor of this request: None when not logged in (no cookie, or a session that
    ended, expired, or whose key was revoked or changed scopes since)."""
    access: Access = request.app.state.access
    if access.keyring is None:
        return anonymous()
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        return None
    sessions = store(request)
    found = sessions.current(session_id)
    if found is None:
        return None
    if not _key_unchanged(access.keyring, found):
        sessions.end(session_id)
        return None
    return Visitor(found.key_id, found.scopes, found.form_token)


def _key_unchanged(keyring: Keyring, session: Session) -> bool:
    """The session's key is still in the ring with the scopes it logged in with (a key whose
    scopes were narrowed must not keep the wider ones until the session expires)."""
    return any(k.key_id == session.key_id and k.scopes == session.scopes for k in keyring)


async def authenticate(access: Access, key: str, address: str) -> tuple[str, frozenset[str]] | None:
    """The id and scopes of ``key``, None for a key this API does not know. Checked as the
    API's key gate checks a new key (services.api.keychecks): throttled per client address
    and in number at once, so the login form is no cheaper way to spend scrypt runs or to
    try keys; a refusal there is an HTTPException 429."""
    if access.keyring is None or not key or len(key) > MAX_KEY_CHARS:
        return None
    stored = access.keyring.recognise(key)
    if stored is None and well_formed(key):
        stored = await access.checks.verify(access.keyring, key, address)
    return None if stored is None else (stored.key_id, stored.scopes)


async def start(response: Response, request: Request, key_id: str, scopes: frozenset[str]) -> None:
    """Open a session for the key and give the browser its id."""
    session_id, _ = await asyncio.to_thread(store(request).open, key_id, scopes)
    response.set_cookie(
        COOKIE,
        session_id,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )


def end(response: Response, request: Request) -> None:
    """End the request's session (its id opens nothing again) and drop the cookie."""
    session_id = request.cookies.get(COOKIE)
    if session_id:
        store(request).end(session_id)
    response.delete_cookie(
        COOKIE, path=PATH, httponly=True, samesite="strict", secure=secure(request)
    )


def secure(request: Request) -> bool:
    """Whether the cookie is ``Secure``: as SAGALINE_CONSOLE_COOKIE_SECURE says, else on
    unless the API listens on loopback only. Not from the request's scheme: behind a proxy
    that ends TLS the API sees http (uvicorn trusts ``X-Forwarded-Proto`` only from
    127.0.0.1) while the browser is on https."""
    settings: Settings = request.app.state.settings
    if settings.console_cookie_secure is not None:
        return settings.console_cookie_secure
    return not loopback(settings.api_host) or request.url.scheme == "https"


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False


def insecure_origin(request: Request) -> bool:
    """The browser says it is on plain http to another machine: a ``Secure`` cookie would be
    dropped (browsers keep one over http for localhost only), and the login would loop."""
    origin = request.headers.get("origin", "")
    if not secure(request) or not origin.startswith("http://"):
        return False
    try:
        host = urlsplit(origin).hostname
    except ValueError:  # not a URL: same_origin refuses it anyway
        return False
    return host is not None and not loopback(host)


def same_origin(request: Request) -> bool:
    """The browser says the form came from this console (or says nothing: an old browser
    or a script; then the form token alone decides)."""
    if request.headers.get("sec-fetch-site") not in (None, "same-origin"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    # Host and port only: behind a proxy that ends TLS the API sees http while the browser
    # says https (the proxy must pass the Host header on, as proxies do by default).
    _scheme, _, netloc = origin.partition("://")
    return netloc != "" and netloc == request.headers.get("host")


def token_matches(expected: str, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(expected.encode(), sent.encode("utf-8"))
