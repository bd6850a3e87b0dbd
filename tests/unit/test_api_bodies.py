"""The API's body guards without a server: the strict JSON reader, prices, the size limit
(as a bare ASGI app fed chunk by chunk) and the error bodies of the app in-process."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from runtime.settings import Settings
from sagas.untrusted import MAX_DEPTH
from services.api.app import create_api
from services.api.body import BodyLimit, NotJson, parse_json
from services.api.requests import LineRequest, OrderRequest, StockRequest
from services.keys import ensure_local_key

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000, f"it is nested deeper than {MAX_DEPTH} levels"),
        (b"[" * 40 + b"]" * 40, f"it is nested deeper than {MAX_DEPTH} levels"),
        (b'{"a": ' * 100_000, "deep"),
        (b'"\xc3\x28"', "not UTF-8 (invalid byte at 1)"),
        (b"NaN", "NaN is not a number JSON allows (byte 0)"),
        (b"-Infinity", "-Infinity is not a number JSON allows"),
        (b"1e400", "a number is out of range"),
        (b'{"a": [1e400]}', "a number is out of range"),
        (b"9" * 5000, "a number is out of range"),
        (b"9" * 40, "integer of 40 digits is out of range"),
        (b'["\\udc00"]', "a lone surrogate \\u escape"),
        (b'["\\ud800"]', "a lone surrogate"),
        (b'{"a": 1,}', "trailing comma in object (byte 8)"),
    ],
)
def test_parse_json_refuses_with_a_sentence_naming_the_problem(body: bytes, why: str) -> None:
    with pytest.raises(NotJson) as refused:
        parse_json(body)
    assert refused.value.status_code == 400
    assert refused.value.detail.startswith("the body is not valid JSON: ")
    assert why in refused.value.detail


def test_parse_json_reads_nesting_up_to_the_limit_and_brackets_inside_strings() -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_json(deep.encode()) is not None
    assert parse_json(b'{"a": "[[[[\\"{{{{"}') == {"a": '[[[["{{{{'}
    assert parse_json('{"é": "\\ud83d\\ude00"}'.encode()) == {"é": "\U0001f600"}


@pytest.mark.parametrize(
    ("price", "expected"),
    [(12, "12"), (12.5, "12.5"), (0.29, "0.29"), ("12.50", "12.50"), (9999999999.99, None)],
)
def test_a_price_is_a_multiple_of_a_cent_as_a_number_or_a_string(
    price: Any, expected: str | None
) -> None:
    line = LineRequest(product_id="p", quantity=1, unit_price=price)
    assert line.unit_price == Decimal(expected or repr(price))


@pytest.mark.parametrize(
    "price", [-1, 0.125, 0.35000000000000003, 1e308, True, "", "1e2", " 5", "12.345", [1], None]
)
def test_a_price_the_schema_does_not_allow_is_refused(price: Any) -> None:
    with pytest.raises(ValidationError):
        LineRequest(product_id="p", quantity=1, unit_price=price)


def test_whole_numbers_are_json_schema_integers() -> None:
    assert StockRequest(on_hand=3.0).on_hand == 3  # type: ignore[arg-type]
    for wrong in (True, "3", 3.5, -1, 2**31):
        with pytest.raises(ValidationError):
            StockRequest(on_hand=wrong)  # type: ignore[arg-type]


def test_an_order_names_each_product_once() -> None:
    line = {"product_id": "p", "quantity": 1, "unit_price": "1"}
    with pytest.raises(ValidationError, match="merge the quantities"):
        OrderRequest.model_validate(
            {"customer_id": "c", "lines": [line, line], "payment": {"method": "card"}}
        )


# --- the size limit, as bare ASGI ------------------------------------------------------


class Recorder:
    """The inner app: reads the whole body, answers 200 with its length."""

    def __init__(self) -> None:
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            self.read += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def run_limited(
    chunks: list[bytes], headers: list[tuple[bytes, bytes]], limit: int = 100
) -> tuple[int, int, list[bytes]]:
    """The status answered, the bytes the inner app read, the chunks never received."""
    pending = list(chunks)
    sent: list[dict[str, Any]] = []
    inner = Recorder()

    async def receive() -> dict[str, Any]:
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    await BodyLimit(inner, max_bytes=limit)(scope, receive, send)
    return sent[0]["status"], inner.read, pending


async def test_a_content_length_over_the_limit_is_answered_before_any_byte_is_read() -> None:
    status, read, pending = await run_limited([b"x" * 60] * 3, [(b"content-length", b"180")])
    assert (status, read, len(pending)) == (413, 0, 3)


async def test_a_stream_over_the_limit_stops_at_the_chunk_that_passes_it() -> None:
    status, read, pending = await run_limited([b"x" * 60] * 5, [])
    assert status == 413
    assert read == 60  # the second chunk (120 bytes in all) is refused, not handed on
    assert len(pending) == 3  # and nothing after it is read


async def test_a_stream_under_the_limit_passes_whole() -> None:
    assert await run_limited([b"x" * 50, b"x" * 50], []) == (200, 100, [])


# --- the error bodies of the app, in-process -------------------------------------------


@pytest.fixture
async def http(tmp_path: Path) -> Any:
    keys = tmp_path / "api-keys"
    key = ensure_local_key(tmp_path / "key", keys)
    app = create_api(Settings(api_max_body_bytes=1000, api_keys_file=keys))
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api", headers=headers
    ) as client:
        yield client


async def test_the_fuzzers_422_with_decimals_in_its_context_is_a_sentence(
    http: httpx.AsyncClient,
) -> None:
    body = {
        "lines": [
            {"product_id": "E5B9e", "quantity": 2343, "unit_price": 57242},
            {"unit_price": -1499, "quantity": 2031, "product_id": "oHm"},
        ],
        "payment": {},
        "customer_id": "lÅ",
    }
    response = await http.post("/orders", json=body)
    assert response.status_code == 422
    message = response.json()["message"]
    assert message.startswith("invalid request: lines.1.unit_price: ")
    assert "payment.method: Field required" in message


async def test_a_422_names_twenty_problems_then_counts_the_rest(http: httpx.AsyncClient) -> None:
    lines = [{"product_id": "", "quantity": 0, "unit_price": -1}] * 10
    response = await http.post("/orders", json={"customer_id": "", "lines": lines})
    assert response.status_code == 422
    assert len(response.json()["detail"]) == 20
    assert response.json()["message"].endswith("more problem(s)")


async def test_a_chunked_body_over_the_limit_is_a_413(http: httpx.AsyncClient) -> None:
    async def chunks() -> Any:
        for _ in range(5):
            yield b" " * 300

    response = await http.put(
        "/products/p/stock", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["message"] == (
        "the request body is larger than this API accepts (1000 bytes at most)"
    )


async def test_unknown_routes_and_wrong_methods_answer_in_the_one_shape(
    http: httpx.AsyncClient,
) -> None:
    missing = await http.get("/nowhere")
    assert missing.status_code == 404
    assert missing.json() == {
        "message": "no route matches GET /nowhere; /docs lists the routes of this API",
        "detail": None,
    }
    wrong = await http.patch("/products/p/stock")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, PUT"
    assert wrong.json()["message"] == (
        "PATCH is not allowed on /products/p/stock; this resource allows GET, PUT"
    )


async def test_text_with_a_nul_is_a_422_before_it_can_reach_postgresql(
    http: httpx.AsyncClient,
) -> None:
    line = {"product_id": "p", "quantity": 1, "unit_price": "1.00"}
    body = {"customer_id": "a\u0000b", "lines": [line], "payment": {"method": "card\u0000"}}
    response = await http.post("/orders", json=body)
    assert response.status_code == 422
    assert {tuple(p["loc"]) for p in response.json()["detail"]} == {
        ("body", "customer_id"),
        ("body", "payment", "method"),
    }
    assert (await http.post("/orders/a%00b/cancel")).status_code == 422
