"""The key gate (services.api.gate): a keyed route refuses a request without a valid key
(401), or without the route's scope (403), from its headers alone, before anything reads
its body; keys that need an scrypt check are throttled (429) per address and in number,
without holding the event loop. (Equal cost for known and unknown key ids: test_keys.py.)

The bus records what would be sent (test_api_auth.RecordingBus): no broker here."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from services import keys
from services.api.app import create_api
from tests.unit.test_api_auth import Api, assert_refused, bearer

pytestmark = pytest.mark.unit

HOSTILE = ("[]" * 33 + '"' + '\\"' * 32000).encode()
"""The issue's body: 64 KB that a backtracking JSON guard took seconds to refuse."""
UNKNOWN = "sgl_0123456789ab_" + "A" * 43


class Raw:
    """One request straight through the ASGI app, recording whether anything pulled its
    body (``receive``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def send(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes = HOSTILE,
        client: tuple[str, int] = ("10.0.0.1", 4000),
    ) -> tuple[int, dict[str, str], Any, bool]:
        """(status, headers, JSON body, whether the request's body was read)."""
        pulled = False
        messages: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            nonlocal pulled
            pulled = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        raw = {"content-type": "application/json", "content-length": str(len(body)), **headers}
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in raw.items()],
            "client": client,
            "server": ("a", 80),
        }
        await self.app(scope, receive, send)
        start = next(m for m in messages if m["type"] == "http.response.start")
        answer = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        response_headers = {k.decode(): v.decode() for k, v in start["headers"]}
        return start["status"], response_headers, json.loads(answer), pulled


@pytest.fixture
def api(tmp_path: Path) -> Api:
    return Api(tmp_path)


@pytest.mark.parametrize(
    ("headers", "sentence"),
    [
        ({}, "POST /orders needs an API key with the 'commands' scope, sent as"),
        (bearer(UNKNOWN), "the API key is not valid here (unknown, revoked or mistyped)"),
        (bearer("not-a-key"), "the API key is not valid here (unknown, revoked or mistyped)"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "POST /orders needs an API key"),
    ],
    ids=["no key", "unknown key", "not a key", "basic scheme"],
)
async def test_a_request_without_a_valid_key_is_a_401_before_its_body_is_read(
    api: Api, headers: dict[str, str], sentence: str
) -> None:
    status, answer_headers, body, pulled = await Raw(api.app).send("POST", "/orders", headers)
    assert status == 401 and sentence in body["message"], body
    assert answer_headers["www-authenticate"] == 'Bearer realm="sagaline"'
    assert body["detail"] is None
    assert not pulled
    assert api.bus.sent == []


async def test_routes_with_path_ids_and_queries_are_refused_unread_too(api: Api) -> None:
    raw = Raw(api.app)
    for method, path, template in [
        ("PUT", "/products/p-1/stock", "PUT /products/{product_id}/stock"),
        ("POST", "/enrollments/e-1/transfer", "POST /enrollments/{enrollment_id}/transfer"),
        ("GET", "/orders/o-1", "GET /orders/{order_id}"),
        ("GET", "/metrics", "GET /metrics"),
    ]:
        status, _, body, pulled = await raw.send(method, path, {})
        assert (status, pulled) == (401, False), (path, body)
        assert body["message"].startswith(template + " needs an API key"), body


async def test_a_key_without_the_routes_scope_is_a_403_before_its_body_is_read(api: Api) -> None:
    reader = api.key("read")
    status, _, body, pulled = await Raw(api.app).send("POST", "/orders", bearer(reader))
    assert status == 403 and not pulled
    assert body["message"] == (
        f"API key {reader.split('_')[1]} has the scope(s) read; "
        "POST /orders needs the 'commands' scope"
    )


async def test_a_body_that_would_be_a_400_is_a_401_without_a_key_and_a_400_with_one(
    api: Api,
) -> None:
    key = api.key("commands")
    broken = {"content": b'{"customer_id": ', "headers": {"Content-Type": "application/json"}}
    async with api.client() as http:
        refused = await http.post("/orders", **broken)  # type: ignore[arg-type]
        assert_refused(refused, 401, "'commands' scope")
        parsed = await http.post(
            "/orders", content=broken["content"], headers=broken["headers"] | bearer(key)
        )
        assert parsed.status_code == 400 and "not valid JSON" in parsed.json()["message"]


async def test_an_admitted_request_is_read_and_answered_by_its_route(api: Api) -> None:
    key = api.key("commands")
    order = {
        "customer_id": "c-1",
        "lines": [{"product_id": "p-1", "quantity": 1, "unit_price": "2.00"}],
        "payment": {"method": "card"},
    }
    status, _, body, pulled = await Raw(api.app).send(
        "POST", "/orders", bearer(key), json.dumps(order).encode()
    )
    assert (status, pulled) == (202, True) and body["status"] == "PENDING"
    assert len(api.bus.sent) == 1


async def test_healthz_the_docs_and_the_console_are_not_behind_the_gate(api: Api) -> None:
    raw = Raw(api.app)
    status, _, body, _ = await raw.send("GET", "/healthz", {}, b"")
    assert (status, body) == (200, {"status": "ok"})
    async with api.client() as http:
        assert (await http.get("/openapi.json")).status_code == 200
        console = await http.get("/console/")
        # The console answers with its own login page or redirect (cookie auth), never the
        # gate's 401.
        assert console.status_code != 401 and "www-authenticate" not in console.headers
        # A wrong method on a keyed path is the router's 405, as before the gate.
        assert (await http.patch("/orders")).status_code == 405


async def test_refusals_are_counted_under_the_routes_template(api: Api) -> None:
    await Raw(api.app).send("PUT", "/products/p-9/stock", {})
    count = api.app.state.prometheus.registry.get_sample_value
    labels = {"route": "/products/{product_id}/stock", "method": "PUT", "status": "401"}
    assert count("sagaline_api_requests_total", labels) == 1


# --- failed key checks: throttled, and never on the event loop ---------------------------


def counting_scrypt(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every scrypt run of services.keys."""
    runs: list[int] = []
    real = keys._scrypt

    def counted(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
        runs.append(n)
        return real(secret, salt, n, r, p)

    monkeypatch.setattr(keys, "_scrypt", counted)
    return runs


async def test_an_address_that_presents_too_many_wrong_keys_gets_429_without_scrypt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow refill: the bucket must stay empty while three scrypt runs happen on a loaded box.
    api = Api(tmp_path, api_key_failures_burst=3, api_key_failures_per_s=0.01)
    known = api.key("commands")
    fresh = api.key("commands")
    raw = Raw(api.app)
    assert (await raw.send("GET", "/orders/o-1", bearer(known)))[0] != 401  # verified once
    runs = counting_scrypt(monkeypatch)
    wrong = [known[:-4] + "ZZZZ", UNKNOWN, known[:-4] + "YYYY"]
    for key in wrong:
        assert (await raw.send("POST", "/orders", bearer(key)))[0] == 401
    assert len(runs) == 3  # each wrong key cost one scrypt run
    status, headers, body, pulled = await raw.send("POST", "/orders", bearer(UNKNOWN))
    assert (status, pulled) == (429, False)
    assert headers["retry-after"] == "100"  # one token at 0.01 per second
    assert body["message"] == (
        "too many API keys that were not valid came from this address: at most 0.01 per "
        "second (bursts of 3); retry after the Retry-After seconds"
    )
    # A new key needs a check too, so it waits with the rest of this address ...
    assert (await raw.send("POST", "/orders", bearer(fresh)))[0] == 429
    assert len(runs) == 3  # ... and neither refusal ran scrypt
    # A key verified before needs no check: it passes; another address has its own bucket.
    assert (await raw.send("GET", "/orders/o-1", bearer(known)))[0] != 429
    elsewhere = await raw.send("POST", "/orders", bearer(UNKNOWN), client=("10.0.0.2", 1))
    assert elsewhere[0] == 401
    # Text that is not shaped like a key is refused without a check, and costs no token.
    assert (await raw.send("POST", "/orders", bearer("garbage")))[0] == 401


async def test_a_key_that_passes_its_check_gives_its_token_back(tmp_path: Path) -> None:
    api = Api(tmp_path, api_key_failures_burst=1, api_key_failures_per_s=0.01)
    raw = Raw(api.app)
    for _ in range(3):  # three new keys, one token: each valid one returns it
        assert (await raw.send("GET", "/orders/o-1", bearer(api.key("read"))))[0] != 429
    assert (await raw.send("GET", "/orders/o-1", bearer(UNKNOWN)))[0] == 401
    assert (await raw.send("GET", "/orders/o-1", bearer(UNKNOWN)))[0] == 429


async def test_checks_past_the_limit_at_once_are_429_and_the_loop_stays_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api(tmp_path, api_key_checks_at_once=1)
    release = threading.Event()
    started = threading.Event()
    real = keys.Keyring.authenticate

    def slow(self: keys.Keyring, presented: str) -> keys.StoredKey | None:
        started.set()
        release.wait(10)
        return real(self, presented)

    monkeypatch.setattr(keys.Keyring, "authenticate", slow)
    raw = Raw(api.app)
    first = asyncio.create_task(raw.send("POST", "/orders", bearer(UNKNOWN)))
    try:
        await asyncio.to_thread(started.wait, 10)
        # While that check runs in its thread, the loop answers other requests at once.
        assert (await raw.send("GET", "/healthz", {}, b""))[0] == 200
        status, headers, body, _ = await raw.send(
            "POST", "/orders", bearer(UNKNOWN), client=("10.0.0.9", 1)
        )
        assert (status, headers["retry-after"]) == (429, "1")
        assert body["message"] == (
            "this API is checking as many new API keys as it may at once (1); "
            "retry after the Retry-After seconds"
        )
    finally:
        release.set()
    assert (await first)[0] == 401
    # The slot is free again once the first check ended.
    assert (await raw.send("POST", "/orders", bearer(UNKNOWN), client=("10.0.0.9", 1)))[0] == 401


async def test_with_auth_off_the_gate_admits_every_caller_and_still_limits_commands(
    tmp_path: Path,
) -> None:
    app = create_api(
        Api(tmp_path).settings.model_copy(
            update={"api_auth": False, "api_rate_per_s": 0.01, "api_rate_burst": 1}
        ),
        bus=Api(tmp_path).bus,  # type: ignore[arg-type]
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://a") as http:
        first = await http.put("/products/p/stock", json={"on_hand": 1})
        second = await http.put("/products/p/stock", json={"on_hand": 1})
    assert (first.status_code, second.status_code) == (202, 429)
    assert "all callers together" in second.json()["message"]
