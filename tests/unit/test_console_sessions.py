"""Console sessions: the cookie is a random id that stands for a key id and its scopes on
the API's side (never the key), ends at logout, after its idle or absolute expiry (a clock
the test moves, no sleeping) or when its key is revoked or re-scoped, and is ``Secure``
unless the API listens on loopback only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from services.api.console import session
from services.api.console.sessions import ID_CHARS, SessionStore
from services.keys import read_key_file, revoke_key
from tests.unit.helpers import Clock
from tests.unit.test_console import Console, form_token

pytestmark = pytest.mark.unit

IDLE_S = 1800.0
ABSOLUTE_S = 12 * 3600.0


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    c = Console(tmp_path)
    yield c
    c.engine.dispose()


def _clocked(console: Console) -> Clock:
    clock = Clock(1_800_000_000.0)
    store: SessionStore = console.app.state.console_sessions
    store.clock = clock
    return clock


async def _page(client: httpx.AsyncClient) -> int:
    return (await client.get("/console")).status_code


async def test_the_cookie_and_the_session_file_hold_no_api_key(console: Console) -> None:
    key = console.key("read", "admin")
    secret = key.split("_", 2)[2]  # sgl_<id>_<secret>; the secret may hold "_" too
    async with console.client() as client:
        response = await client.post("/console/login", data={"api_key": key})
        assert response.status_code == 303
        cookies = response.headers.get_list("set-cookie")
        assert cookies and all(key not in c and secret not in c for c in cookies)
        session_id = client.cookies[session.COOKIE]
        assert len(session_id) == ID_CHARS
        stored = list(console.settings.console_sessions_dir.iterdir())
        assert len(stored) == 1 and session_id not in stored[0].name
        assert secret not in stored[0].read_text() and session_id not in stored[0].read_text()
        assert oct(stored[0].stat().st_mode & 0o777) == "0o600"
        # Two logins with one key are two sessions, each with its own form token.
        async with console.client() as other:
            await other.post("/console/login", data={"api_key": key})
            assert other.cookies[session.COOKIE] != session_id
            assert await form_token(other) != await form_token(client)


async def test_a_session_unused_for_the_idle_time_ends(console: Console) -> None:
    clock = _clocked(console)
    async with console.logged_in("read") as client:
        clock.now += IDLE_S - 1
        assert await _page(client) == 200  # used: the idle time starts again
        clock.now += IDLE_S - 1
        assert await _page(client) == 200
        clock.now += IDLE_S + 1
        assert await _page(client) == 303
        clock.now += 1
        assert await _page(client) == 303  # ended, not just refused once
    assert list(console.settings.console_sessions_dir.iterdir()) == []


async def test_a_busy_session_ends_at_its_absolute_expiry(console: Console) -> None:
    clock = _clocked(console)
    opened = clock.now
    async with console.logged_in("read") as client:
        while clock.now < opened + ABSOLUTE_S - 600:
            clock.now += 600  # a click every ten minutes: never idle
            assert await _page(client) == 200
        clock.now = opened + ABSOLUTE_S - 1
        assert await _page(client) == 200
        clock.now = opened + ABSOLUTE_S + 1
        assert await _page(client) == 303


async def test_a_revoked_key_ends_its_sessions_at_the_next_request(console: Console) -> None:
    async with console.logged_in("read", "admin") as client:
        assert await _page(client) == 200
        [stored] = read_key_file(console.keys)
        revoke_key(console.keys, stored.key_id)
        assert await _page(client) == 303
        token_page = await client.post("/console/logout", data={"form_token": "x"})
        assert token_page.status_code == 303  # logged out already: nothing to protect
    assert list(console.settings.console_sessions_dir.iterdir()) == []


async def test_a_key_whose_scopes_changed_ends_its_sessions(console: Console) -> None:
    async with console.logged_in("read", "admin") as client:
        [stored] = read_key_file(console.keys)
        # The same key id, now with fewer scopes (an edited key file line).
        line = stored.line().replace("read,admin", "read")
        console.keys.write_text(line + "\n")
        assert await _page(client) == 303


async def test_past_the_cap_a_login_ends_the_least_recently_used_session(
    tmp_path: Path,
) -> None:
    console = Console(tmp_path, console_sessions_max=2)
    clock = _clocked(console)
    try:
        async with (
            console.logged_in("read") as first,
            console.logged_in("read") as second,
        ):
            clock.now += 10
            assert await _page(first) == 200  # now the second is the least recently used
            clock.now += 10
            async with console.logged_in("read") as third:
                assert await _page(third) == 200
                assert await _page(first) == 200
                assert await _page(second) == 303
            assert len(list(console.settings.console_sessions_dir.iterdir())) == 2
    finally:
        console.engine.dispose()


@pytest.mark.parametrize(
    ("host", "setting", "secure"),
    [
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
        ("0.0.0.0", None, True),
        ("10.1.2.3", None, True),
        ("console.example", None, True),
        ("0.0.0.0", False, False),
        ("127.0.0.1", True, True),
    ],
)
async def test_the_cookie_is_secure_unless_the_api_listens_on_loopback(
    tmp_path: Path, host: str, setting: bool | None, secure: bool
) -> None:
    console = Console(tmp_path, api_host=host, console_cookie_secure=setting)
    try:
        async with console.client() as client:  # plain http, as behind a proxy ending TLS
            response = await client.post("/console/login", data={"api_key": console.key("read")})
        assert response.status_code == 303
        flags = {f.strip().lower() for f in response.headers["set-cookie"].split(";")[1:]}
        assert ("secure" in flags) is secure
    finally:
        console.engine.dispose()


async def test_a_secure_cookie_is_usable_over_https_and_refused_a_plain_http_page(
    tmp_path: Path,
) -> None:
    console = Console(tmp_path, api_host="0.0.0.0")
    try:
        async with console.logged_in("read", origin="https://console.test") as client:
            assert await _page(client) == 200
        async with console.client() as client:
            # A browser on plain http to another machine would drop a Secure cookie: the
            # login says so instead of looping back to itself.
            response = await client.post(
                "/console/login",
                data={"api_key": console.key("read")},
                headers={"Origin": "http://console.test"},
            )
        assert response.status_code == 400 and "set-cookie" not in response.headers
        assert "SAGALINE_CONSOLE_COOKIE_SECURE=false" in response.text
    finally:
        console.engine.dispose()


@pytest.mark.parametrize(
    "cookie", [b"", b"x", b"a" * ID_CHARS, b"../" * 15, "\xe9".encode("latin-1") * ID_CHARS]
)
async def test_a_cookie_that_is_no_session_opens_nothing(console: Console, cookie: bytes) -> None:
    async with console.client() as client:
        header = session.COOKIE.encode() + b"=" + cookie
        response = await client.get("/console", headers={b"cookie": header})
    assert response.status_code == 303 and response.headers["location"] == "/console/login"
