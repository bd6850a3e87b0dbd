"""Who is using the console, and whether a form was sent by the console itself.

A browser cannot send ``Authorization`` on a navigation, so the console's login form takes
an API key and keeps it in a cookie: HttpOnly (no script reads it), SameSite=Strict (no
other site's page makes the browser send it), Secure when the console is reached over
https, Path=/console (the JSON API never sees it: there, keys are sent as headers). The key
is checked on every request exactly as a header's would be, so a revoked key is logged out
at its next click. Never in a URL: the form is a POST, and the login page is not cached.

Every form (re-drive, logout, login) also carries a token derived from the key by HMAC, and
its ``Origin`` (when the browser sends one) must be this console's: a request another site
forges has neither the key to derive the token nor our origin.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import Request
from starlette.responses import Response

from services.api.auth import ANONYMOUS, Access
from services.keys import SCOPES

COOKIE = "sagaline_console"
PATH = "/console"
MAX_KEY_CHARS = 200
"""Longer than any key ``sagaline keys`` makes; a longer cookie or field is not a key."""
_ANONYMOUS_SECRET = secrets.token_bytes(32)
"""With auth off there is no key to derive form tokens from: a secret of this process."""


@dataclass(frozen=True)
class Visitor:
    """A logged-in console user: a key's id (never the key) and its scopes."""

    key_id: str
    scopes: frozenset[str]
    form_token: str
    """What every form of this visitor's pages carries (see :func:`form_token`)."""

    def may(self, scope: str) -> bool:
        return scope in self.scopes


def form_token(key: str | None) -> str:
    """HMAC of a fixed label under the key: only a holder of the key can compute it."""
    secret = _ANONYMOUS_SECRET if key is None else key.encode()
    return hmac.new(secret, b"sagaline-console-form", hashlib.sha256).hexdigest()


async def visitor(request: Request) -> Visitor | None:
    """The visitor of this request: None when not logged in (no cookie, or a key this API
    does not know, e.g. revoked since)."""
    access: Access = request.app.state.access
    if access.keyring is None:
        return Visitor(ANONYMOUS, frozenset(SCOPES), form_token(None))
    key = request.cookies.get(COOKIE)
    if not key or len(key) > MAX_KEY_CHARS:
        return None
    return await login(access, key)


async def login(access: Access, key: str) -> Visitor | None:
    """The visitor a key makes, None for a key this API does not know."""
    if access.keyring is None:
        return Visitor(ANONYMOUS, frozenset(SCOPES), form_token(None))
    if not key or len(key) > MAX_KEY_CHARS:
        return None
    stored = await asyncio.to_thread(access.keyring.authenticate, key)
    if stored is None:
        return None
    return Visitor(stored.key_id, stored.scopes, form_token(key))


def keep(response: Response, request: Request, key: str) -> None:
    response.set_cookie(
        COOKIE,
        key,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def forget(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, path=PATH, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


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
