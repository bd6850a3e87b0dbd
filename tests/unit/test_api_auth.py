"""Who may call which route, in-process: every route of the OpenAPI document without a key,
with a key of each scope; 401/403 bodies and headers; rotation; the token bucket (429); the
warning when auth is off; and no key, hash or Authorization header in any log line.

The command bus here is a stand-in that records what would be sent: these tests are about
the API's door, not Kafka (the integration tests send through the real broker, and
test_api_contract fuzzes the same document authenticated)."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from runtime.settings import Settings
from services.api import actions as api_actions
from services.api import queries
from services.api.app import create_api
from services.api.auth import access_for, announce
from services.api.domain_routes import domain_routers
from services.api.ratelimit import TokenBuckets, retry_after
from services.bus import Position
from services.keys import add_key, revoke_key
from services.logsafe import install, redact

pytestmark = pytest.mark.unit

SCOPE_OF = {"post": "commands", "put": "commands", "delete": "commands", "get": "read"}


def scope_of(method: str, path: str) -> str:
    return "admin" if (method, path) in routed(api_actions.router) else SCOPE_OF[method]


class RecordingBus:
    """Answers like a CommandBus whose broker acknowledged every send."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, channel: str, envelope: Any) -> Position:
        self.sent.append((channel, envelope))
        return Position(channel, 0, len(self.sent))


class Api:
    def __init__(self, tmp: Path, **overrides: Any) -> None:
        self.keys = tmp / "api-keys"
        self.settings = Settings(api_keys_file=self.keys, **overrides)
        self.bus = RecordingBus()
        self.app = create_api(self.settings, bus=self.bus)  # type: ignore[arg-type]

    def key(self, *scopes: str) -> str:
        key, _ = add_key(self.keys, scopes, "test")
        return key

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://a")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    yield Api(tmp_path)


def operations(app: Any) -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, ops in app.openapi()["paths"].items()
        for method in ops
        if path != "/healthz"
    ]


def request_for(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """A valid request for the operation: ids filled in, and where it takes a body, the
    example its request model declares (an optional body is left out)."""
    url = re.sub(r"\{[a-z_]+\}", "x-1", path)
    body: Any = None
    schema = document["paths"][path][method].get("requestBody", {})
    ref = schema.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    if ref is not None:
        body = document["components"]["schemas"][ref.rsplit("/", 1)[1]]["examples"][0]
    return {"method": method.upper(), "url": url, "json": body}


def routed(*routers: APIRouter) -> list[tuple[str, str]]:
    """(method, path) of each route of ``routers``, as the OpenAPI document names them."""
    return [
        (method.lower(), route.path)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    ]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_refused(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"message", "detail"} and body["detail"] is None
    for word in words:
        assert word in body["message"], (word, body["message"])


async def test_every_route_answers_401_403_or_success_as_its_scope_says(tmp_path: Path) -> None:
    # Not the throttle of keys that are not valid: one per route comes from this client.
    api = Api(tmp_path, api_key_failures_burst=1_000_000)
    keys = {
        "none": None,
        "unknown": "sgl_0123456789ab_" + "A" * 43,
        "read": api.key("read"),
        "commands": api.key("commands"),
        "admin": api.key("admin"),
        "both": api.key("commands", "read"),
    }
    routes = operations(api.app)
    # Every domain's routes (as declared); the saga list and one, the overview, projections.
    domains = domain_routers()
    every = (*domains.commands, *domains.queries, *queries.ROUTERS, api_actions.router)
    assert sorted(routes) == sorted(routed(*every))
    command_routes = [r for r in routes if scope_of(*r) == "commands"]
    document = api.app.openapi()
    async with api.client() as http:
        for method, path in routes:
            scope = scope_of(method, path)
            for name, key in keys.items():
                headers = {} if key is None else bearer(key)
                request = request_for(document, method, path)
                response = await http.request(**request, headers=headers)
                if key is None or name == "unknown":
                    assert_refused(response, 401, f"'{scope}' scope")
                    assert response.headers["www-authenticate"] == 'Bearer realm="sagaline"'
                elif name == scope or (name == "both" and scope != "admin"):
                    # Past the door: commands are accepted; queries and actions reach their
                    # handler, which has no read-model database in this in-process app (503).
                    expected = 202 if scope == "commands" else 503
                    assert response.status_code == expected, (method, path, response.text)
                else:
                    assert_refused(response, 403, f"needs the '{scope}' scope", "API key")
    # One per command route for "commands" and "both".
    assert len(api.bus.sent) == len(command_routes) * 2 == len(routed(*domains.commands)) * 2


async def test_a_refusal_never_repeats_the_key_it_was_sent(api: Api) -> None:
    read_only = api.key("read")
    wrong = read_only[:-3] + "xyz"
    async with api.client() as http:
        for key in (read_only, wrong, "not-a-key-at-all"):
            response = await http.put("/products/p/stock", json={"on_hand": 1}, headers=bearer(key))
            assert response.status_code in (401, 403)
            # The secret is everything after "<prefix>_<id>_": token_urlsafe may put "_" in
            # it, so split at most twice (a short tail would match response text by chance).
            secret = key.split("_", 2)[-1]
            assert key not in response.text and secret not in response.text


async def test_healthz_needs_no_key(api: Api) -> None:
    async with api.client() as http:
        assert (await http.get("/healthz")).status_code == 200


async def test_a_new_key_works_beside_the_old_until_the_old_is_revoked(api: Api) -> None:
    old = api.key("commands")
    async with api.client() as http:
        stock = {"json": {"on_hand": 1}}
        assert (
            await http.put("/products/p/stock", **stock, headers=bearer(old))
        ).status_code == 202
        new = api.key("commands")
        for key in (old, new):
            response = await http.put("/products/p/stock", **stock, headers=bearer(key))
            assert response.status_code == 202
        revoke_key(api.keys, old.split("_")[1])
        refused = await http.put("/products/p/stock", **stock, headers=bearer(old))
        assert_refused(refused, 401, "revoked")
        assert (
            await http.put("/products/p/stock", **stock, headers=bearer(new))
        ).status_code == 202


async def test_a_key_over_its_rate_gets_429_with_retry_after(tmp_path: Path) -> None:
    api = Api(tmp_path, api_rate_per_s=0.5, api_rate_burst=2)
    first, second = api.key("commands", "read"), api.key("commands")
    async with api.client() as http:
        stock = {"json": {"on_hand": 1}}
        answers = [
            await http.put("/products/p/stock", **stock, headers=bearer(first)) for _ in range(3)
        ]
        assert [a.status_code for a in answers] == [202, 202, 429]
        assert_refused(answers[2], 429, "too many commands", "0.5 per second")
        assert answers[2].headers["retry-after"] == "2"
        # Each key has its own bucket; queries spend none.
        other = await http.put("/products/p/stock", **stock, headers=bearer(second))
        assert other.status_code == 202
        query = await http.get("/products/p/stock", headers=bearer(first))
        assert query.status_code == 503  # past the door (no read-model database here)


def test_the_token_bucket_refills_at_its_rate() -> None:
    now = [100.0]
    buckets = TokenBuckets(rate_per_s=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == pytest.approx(0.5)
    now[0] += 0.5
    assert buckets.take("k") == 0.0
    now[0] += 100
    assert [buckets.take("k") for _ in range(4)][-1] > 0  # never more than the burst
    assert buckets.take("other") == 0.0
    assert retry_after(0.01) == "1" and retry_after(2.2) == "3"


async def test_with_auth_off_every_route_is_open_and_the_start_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api(tmp_path, api_auth=False)
    document = api.app.openapi()
    assert "securitySchemes" not in document.get("components", {})
    assert all("security" not in op for ops in document["paths"].values() for op in ops.values())
    async with api.client() as http:
        response = await http.put("/products/p/stock", json={"on_hand": 1})
        assert response.status_code == 202
    with caplog.at_level(logging.WARNING):
        announce(api.settings, access_for(api.settings))
    assert "SAGALINE_API_AUTH is false: every route of this API is open" in caplog.text


def test_an_api_without_any_key_says_so_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(api_keys_file=tmp_path / "none")
    with caplog.at_level(logging.ERROR):
        announce(settings, access_for(settings))
    assert "no API keys in" in caplog.text and "sagaline keys create" in caplog.text


async def test_no_key_hash_or_authorization_header_reaches_a_log(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    install()
    key = api.key("commands", "read")
    hashed = api.keys.read_text().splitlines()[-1].split()[2]
    wrong = key[:-5] + "ZZZZZ"
    caplog.set_level(logging.DEBUG)
    async with api.client() as http:
        for headers in (bearer(key), bearer(wrong), {"Authorization": f"Basic {key}"}, {}):
            await http.put("/products/p/stock", json={"on_hand": 1}, headers=headers)
            await http.post("/orders", json={"bad": True}, headers=headers)
            await http.get("/orders/o?wait=0", headers=headers)
    # What a library might log on its own, the way it would log it: all cleaned.
    logger = logging.getLogger("some.library")
    logger.debug("request headers: %s", {"authorization": f"Bearer {key}", "host": "a"})
    logger.info("sending %r", [(b"authorization", f"Bearer {key}".encode())])
    logger.warning("key file line: %s", api.keys.read_text())
    try:
        raise ValueError(f"could not parse {key}")
    except ValueError:
        logger.exception("failed")
    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    secret = key.split("_", 2)[2]
    for forbidden in (key, secret, wrong.split("_", 2)[2], hashed, hashed.split("$")[-1]):
        assert forbidden not in text
    assert key.split("_")[1] in text  # the key's id stays: it names the key
    assert "Bearer ***" in text or "authorization': '***" in text


def test_redact_keeps_the_id_and_drops_secrets() -> None:
    key = "sgl_0123456789ab_" + "s" * 43
    assert redact(f"got {key}.") == "got sgl_0123456789ab_***."
    assert redact("Authorization: Bearer abc.def") == "Authorization: ***"
    assert redact("{'authorization': 'Basic dXNlcjpwYXNz'}") == "{'authorization': '***'}"
    assert redact("hash scrypt$16384$8$1$c2Fs$aGFz end") == "hash scrypt$*** end"
    assert redact("nothing to hide") == "nothing to hide"
