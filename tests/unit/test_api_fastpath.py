"""The API's fast paths cannot drift from its contract.

- A 202 body serialized once (``commands.accepted``) is byte for byte what the documented
  ``response_model`` would serialize.
- POST /orders answers the same with and without its fast path (services.api.fastpath):
  valid orders, and every kind of request the fast path hands to the FastAPI route (no key,
  a wrong or read-only key, a bad content type, broken or nested JSON, an invalid order, an
  Idempotency-Key too long or sent twice, an Idempotency-Key reused with another body, an
  empty token bucket): same status, same body, same headers that matter, same commands
  sent.
- The server configuration: uvloop and httptools, the worker count, the access log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.settings import Settings
from services.api import orders
from services.api.app import create_api
from services.api.commands import Accepted, accepted
from services.api.enrollment_models import (
    CourseAccepted,
    DropAccepted,
    EnrollmentAccepted,
    StudentAccepted,
    TransferAccepted,
)
from services.api.orders import CancelAccepted, OrderAccepted
from services.api.products import StockAccepted
from services.api.server import APP_FACTORY, loop_and_parser, server_config
from services.bus import Position
from services.keys import add_key

pytestmark = pytest.mark.unit

TOKEN = "cmd-0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        (OrderAccepted, {"order_id": "o-1"}),
        (CancelAccepted, {"order_id": "o-1"}),
        (StockAccepted, {"product_id": "p-1", "on_hand": 7}),
        (CourseAccepted, {"course_id": "c-1"}),
        (StudentAccepted, {"student_id": "s-1"}),
        (EnrollmentAccepted, {"enrollment_id": "e-1"}),
        (DropAccepted, {"enrollment_id": "e-1"}),
        (TransferAccepted, {"enrollment_id": "e-1", "course_id": "c-2"}),
    ],
)
def test_a_202_body_serialized_once_is_what_its_response_model_serializes(
    model: type[Accepted], fields: dict[str, Any]
) -> None:
    response = accepted(model, consistency_token=TOKEN, **fields)
    validated = model(consistency_token=TOKEN, **fields)
    assert response.status_code == 202
    assert response.headers["content-type"] == "application/json"
    assert bytes(response.body) == validated.model_dump_json().encode()
    assert model.model_validate_json(response.body) == validated


class RecordingBus:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def send(self, channel: str, envelope: Any) -> Position:
        self.sent.append((channel, envelope))
        return Position(channel, 0, len(self.sent))


ORDER = {
    "customer_id": "c-1",
    "lines": [{"product_id": "p-1", "quantity": 2, "unit_price": "1.50"}],
    "payment": {"method": "card"},
}


def cases(key: str, reader: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, httpx request arguments) for POST /orders."""
    auth = {"Authorization": f"Bearer {key}"}
    js = auth | {"Content-Type": "application/json"}
    line = ORDER["lines"][0]
    charset = {"Content-Type": "application/json; charset=utf-8", "Idempotency-Key": "k-4"}
    twice = [("Authorization", f"Bearer {key}"), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    return [
        ("valid", {"json": ORDER, "headers": auth | {"Idempotency-Key": "k-1"}}),
        (
            "valid, number price",
            {
                "json": ORDER | {"lines": [line | {"unit_price": 2}]},
                "headers": auth | {"Idempotency-Key": "k-2"},
            },
        ),
        ("valid, empty key", {"json": ORDER, "headers": auth | {"Idempotency-Key": ""}}),
        (
            "same key, other body",
            {"json": ORDER | {"customer_id": "c-2"}, "headers": auth | {"Idempotency-Key": "k-1"}},
        ),
        ("no key", {"json": ORDER, "headers": {"Idempotency-Key": "k-3"}}),
        ("wrong key", {"json": ORDER, "headers": {"Authorization": f"Bearer {key[:-4]}ZZZZ"}}),
        ("basic scheme", {"json": ORDER, "headers": {"Authorization": f"Basic {key}"}}),
        ("read-only key", {"json": ORDER, "headers": {"Authorization": f"Bearer {reader}"}}),
        (
            "text/plain",
            {"content": json.dumps(ORDER), "headers": auth | {"Content-Type": "text/plain"}},
        ),
        ("json; charset", {"content": json.dumps(ORDER), "headers": auth | charset}),
        ("broken json", {"content": b'{"customer_id": ', "headers": js}),
        ("not utf-8", {"content": b'{"customer_id": "\xff"}', "headers": js}),
        ("NaN", {"content": b'{"customer_id": NaN}', "headers": js}),
        ("nested", {"content": b"[" * 200 + b"]" * 200, "headers": js}),
        ("empty body", {"content": b"", "headers": js}),
        ("not an object", {"json": [1, 2], "headers": auth}),
        ("extra field", {"json": ORDER | {"x": 1}, "headers": auth}),
        (
            "bad price",
            {"json": ORDER | {"lines": [line | {"unit_price": "1.234"}]}, "headers": auth},
        ),
        ("two lines, one product", {"json": ORDER | {"lines": [line, line]}, "headers": auth}),
        (
            "idempotency key too long",
            {"json": ORDER, "headers": auth | {"Idempotency-Key": "k" * 201}},
        ),
        ("idempotency key twice", {"json": ORDER, "headers": twice}),
    ]


async def answers(
    tmp: Path, fast: bool, monkeypatch: pytest.MonkeyPatch, **overrides: Any
) -> tuple[list[tuple[str, int, Any, str | None]], list[Any], int]:
    """Every case's (name, status, body, Retry-After), the commands sent, and how many
    requests the fast path answered itself."""
    keys = tmp / "api-keys"  # one key file: both runs present the same keys
    if not keys.exists():
        (tmp / "key").write_text(add_key(keys, ["commands", "read"], "test")[0])
        (tmp / "reader").write_text(add_key(keys, ["read"], "reader")[0])
    key, reader = (tmp / "key").read_text(), (tmp / "reader").read_text()
    settings = Settings(api_keys_file=keys, **overrides)
    bus = RecordingBus()
    app = create_api(settings, bus=bus)  # type: ignore[arg-type]
    real = orders.place_order.fast  # type: ignore[attr-defined]
    served = 0

    async def counting(request: Any) -> Any:
        nonlocal served
        response = await real(request) if fast else None
        served += response is not None
        return response

    monkeypatch.setattr(orders.place_order, "fast", counting)
    seen = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://a") as http:
        # A key is verified once (scrypt) by the FastAPI route, then known to the fast path.
        await http.get("/orders/none?wait=0", headers={"Authorization": f"Bearer {key}"})
        await http.get("/orders/none?wait=0", headers={"Authorization": f"Bearer {reader}"})
        for name, request in cases(key, reader):
            response = await http.post("/orders", **request)
            body = response.json() if response.content else None
            if isinstance(body, dict) and "Idempotency-Key" not in str(request["headers"]):
                body.pop("order_id", None)  # a random id without an Idempotency-Key
                body.pop("consistency_token", None)
            seen.append((name, response.status_code, body, response.headers.get("retry-after")))
    sent = [(channel, env.model_dump(exclude={"occurred_at"})) for channel, env in bus.sent]
    return seen, sent, served


async def test_post_orders_answers_the_same_with_and_without_its_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_fast, sent_fast, served = await answers(tmp_path, True, monkeypatch)
    without, sent_slow, none = await answers(tmp_path, False, monkeypatch)
    assert with_fast == without
    statuses = {name: status for name, status, _, _ in with_fast}
    assert statuses["valid"] == statuses["valid, empty key"] == statuses["json; charset"] == 202
    assert statuses["no key"] == 401 and statuses["read-only key"] == 403
    assert statuses["broken json"] == 400 and statuses["bad price"] == 422
    assert statuses["same key, other body"] == 422
    assert len(sent_fast) == len(sent_slow) == 5  # the 4 valid ones, and a key sent twice
    # Envelopes with an Idempotency-Key are fully determined: equal on both paths.
    assert sent_fast[0] == sent_slow[0] and sent_fast[1] == sent_slow[1]
    assert served == 3 and none == 0  # valid, number price, empty key; charset goes slow


async def test_an_empty_bucket_is_answered_429_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = {"api_rate_per_s": 0.001, "api_rate_burst": 2}
    with_fast, _, served = await answers(tmp_path, True, monkeypatch, **limited)
    without, _, _ = await answers(tmp_path, False, monkeypatch, **limited)
    assert with_fast == without
    assert [status for _, status, _, _ in with_fast][:3] == [202, 202, 429]
    assert served == 2


def test_the_server_runs_on_uvloop_and_httptools_with_the_configured_workers() -> None:
    assert loop_and_parser() == ("uvloop", "httptools")  # uvicorn[standard] is a dependency
    settings = Settings(api_workers=3, api_port=18123)
    config = server_config(APP_FACTORY, settings, own_logging=True)
    assert (config.loop, config.http, config.workers) == ("uvloop", "httptools", 3)
    assert config.factory and not config.access_log and config.log_config is None
    single = server_config(APP_FACTORY, Settings(api_access_log=True), own_logging=False)
    assert single.workers == 1 and single.access_log


def test_the_worker_factory_builds_the_api_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from runtime.settings import get_settings
    from services.api.app import create_api_from_environment

    monkeypatch.setenv("SAGALINE_API_KEYS_FILE", str(tmp_path / "keys"))
    get_settings.cache_clear()
    try:
        app = create_api_from_environment()
        assert app.state.settings.api_keys_file == tmp_path / "keys"
    finally:
        get_settings.cache_clear()


def test_loop_and_parser_fall_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "uvloop" else real(name)
    )
    assert loop_and_parser() == ("asyncio", "httptools")
    assert "uvloop or httptools is not installed" in caplog.text


class FailingBus:
    """A command bus whose broker is gone (KafkaConnectionError), or which fails in a way
    no handler knows (RuntimeError)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def send(self, channel: str, envelope: Any) -> Position:
        raise self.error


async def failing_answers(
    tmp: Path, fast: bool, error: Exception, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, Any, int]:
    """(status, body, requests the fast path answered) for one valid order."""
    keys = tmp / "api-keys"
    if not keys.exists():
        (tmp / "key").write_text(add_key(keys, ["commands", "read"], "test")[0])
    key = (tmp / "key").read_text()
    app = create_api(Settings(api_keys_file=keys), bus=FailingBus(error))  # type: ignore[arg-type]
    real = orders.place_order.fast  # type: ignore[attr-defined]
    tried = 0

    async def counting(request: Any) -> Any:
        nonlocal tried
        tried += 1
        return await real(request) if fast else None

    monkeypatch.setattr(orders.place_order, "fast", counting)
    auth = {"Authorization": f"Bearer {key}", "Idempotency-Key": "k-1"}
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://a") as http:
        await http.get("/orders/none?wait=0", headers=auth)  # the key is verified once
        response = await http.post("/orders", json=ORDER, headers=auth)
    return response.status_code, response.json(), tried


async def test_a_broker_failure_on_the_fast_path_is_the_routes_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiokafka.errors import KafkaConnectionError

    error = KafkaConnectionError("no broker")
    fast = await failing_answers(tmp_path, True, error, monkeypatch)
    slow = await failing_answers(tmp_path, False, error, monkeypatch)
    assert fast[:2] == slow[:2]
    assert fast[0] == 503 and "the message broker is unavailable" in fast[1]["message"]
    assert fast[2] == 1  # the fast path took the request, and answered it with the handler


async def test_an_unexpected_failure_on_the_fast_path_is_the_routes_500(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = await failing_answers(tmp_path, True, RuntimeError("bug"), monkeypatch)
    slow = await failing_answers(tmp_path, False, RuntimeError("bug"), monkeypatch)
    assert fast[:2] == slow[:2]
    assert fast[0] == 500


async def test_requests_the_fast_path_answers_are_counted_under_the_routes_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, served = await answers(tmp_path, True, monkeypatch)
    assert served == 3
    keys = tmp_path / "api-keys"
    app = create_api(Settings(api_keys_file=keys), bus=RecordingBus())  # type: ignore[arg-type]
    key = (tmp_path / "key").read_text()
    auth = {"Authorization": f"Bearer {key}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://a") as http:
        await http.get("/orders/none?wait=0", headers=auth)
        for _ in range(3):
            assert (await http.post("/orders", json=ORDER, headers=auth)).status_code == 202
        broken = auth | {"Content-Type": "application/json"}
        assert (await http.post("/orders", content=b"{", headers=broken)).status_code == 400
    registry = app.state.prometheus.registry
    count = registry.get_sample_value
    assert (
        count(
            "sagaline_api_requests_total", {"route": "/orders", "method": "POST", "status": "202"}
        )
        == 3
    )
    assert (
        count(
            "sagaline_api_requests_total", {"route": "/orders", "method": "POST", "status": "400"}
        )
        == 1
    )
