"""Idempotency-Keys are the calling API key's own (services.api.idempotency): one key used by
two callers is two orders; the same caller's retry with the same body is the same answer, in
any API process; with another body it is a 422 with a sentence, on the fast path and the
FastAPI route alike; ids cannot be computed without the caller's API key.

The bus records what would be sent (test_api_auth.RecordingBus): no broker here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.commands import new_entity_id
from services.api.idempotency import DIFFERENT_BODY, Remembered, idempotency_namespace
from services.api.requests import StockRequest
from tests.unit.test_api_auth import Api, assert_refused, bearer

pytestmark = pytest.mark.unit

ORDER = {
    "customer_id": "c-1",
    "lines": [{"product_id": "p-1", "quantity": 2, "unit_price": "1.50"}],
    "payment": {"method": "card"},
}
FAST = {"Content-Type": "application/json"}
"""What the fast path takes (services.api.fastpath) ..."""
SLOW = {"Content-Type": "application/json; charset=utf-8"}
"""... and what it hands to the FastAPI route."""


def idem(key: str, api_key: str, path: dict[str, str] = FAST) -> dict[str, str]:
    return bearer(api_key) | {"Idempotency-Key": key} | path


async def place(http: httpx.AsyncClient, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await http.post("/orders", content=json.dumps(body), headers=headers)


@pytest.fixture
def api(tmp_path: Path) -> Api:
    return Api(tmp_path)


@pytest.mark.parametrize("path", [FAST, SLOW], ids=["fast path", "FastAPI route"])
async def test_one_idempotency_key_used_by_two_callers_is_two_orders(
    api: Api, path: dict[str, str]
) -> None:
    first, second = api.key("commands"), api.key("commands")
    async with api.client() as http:
        a = await place(http, ORDER, idem("shared-1", first, path))
        b = await place(http, ORDER | {"customer_id": "c-2"}, idem("shared-1", second, path))
    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json()["order_id"] != b.json()["order_id"]
    assert a.json()["consistency_token"] != b.json()["consistency_token"]
    placed = [envelope for _, envelope in api.bus.sent]
    assert [e.key for e in placed] == [a.json()["order_id"], b.json()["order_id"]]
    # Each saga got its own caller's body: nothing was dropped.
    assert [e.payload["customer_id"] for e in placed] == ["c-1", "c-2"]


@pytest.mark.parametrize("path", [FAST, SLOW], ids=["fast path", "FastAPI route"])
async def test_the_same_key_and_body_again_is_the_same_answer(
    api: Api, path: dict[str, str]
) -> None:
    key = api.key("commands")
    # The same request written differently (spacing, key order) is the same body.
    respelled = json.loads(json.dumps(ORDER), object_pairs_hook=lambda p: dict(reversed(p)))
    async with api.client() as http:
        first = await place(http, ORDER, idem("retry-1", key, path))
        again = await http.post(
            "/orders", content=json.dumps(respelled, indent=2), headers=idem("retry-1", key, path)
        )
    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json() == again.json()
    # Both sends carry one message id: the worker drops the second as a duplicate.
    assert len({e.message_id for _, e in api.bus.sent}) == 1


async def test_the_same_key_with_another_body_is_a_422_on_both_paths(api: Api) -> None:
    key = api.key("commands")
    async with api.client() as http:
        first = await place(http, ORDER, idem("k-1", key, FAST))
        assert first.status_code == 202
        other = ORDER | {"customer_id": "c-9"}
        answers = [await place(http, other, idem("k-1", key, path)) for path in (FAST, SLOW)]
        for answer in answers:
            assert_refused(answer, 422, "this Idempotency-Key was used with a different")
        assert answers[0].json() == answers[1].json() == {"message": DIFFERENT_BODY, "detail": None}
        # Sending the first body again still gets the first answer.
        assert (await place(http, ORDER, idem("k-1", key, SLOW))).json() == first.json()
    assert len(api.bus.sent) == 2  # the first, and its repeat; never the other body


async def test_every_command_route_refuses_a_key_reused_with_another_body(api: Api) -> None:
    key = api.key("commands")
    async with api.client() as http:
        requests: list[tuple[str, str, Any, Any]] = [
            ("PUT", "/products/p-1/stock", {"on_hand": 3}, {"on_hand": 4}),
            ("POST", "/orders/o-1/cancel", None, {"reason": "changed my mind"}),
            ("PUT", "/courses/k-1", {"title": "A", "capacity": 3, "credits": 4}, None),
            ("PUT", "/students/s-1", {"name": "Ada", "max_credits": 12}, {"name": "Bo"}),
            ("POST", "/enrollments", {"student_id": "s-1", "course_id": "k-1"}, {"x": 1}),
            ("POST", "/enrollments/e-1/transfer", {"course_id": "k-2"}, {"course_id": "k-3"}),
        ]
        for method, url, body, other in requests:
            headers = idem(f"{url}-key", key)
            kwargs: dict[str, Any] = {} if body is None else {"json": body}
            first = await http.request(method, url, headers=headers, **kwargs)
            again = await http.request(method, url, headers=headers, **kwargs)
            assert first.status_code == again.status_code == 202, (url, first.text)
            assert first.json() == again.json(), url
            changed = {} if other is None else {"json": other}
            refused = await http.request(method, url, headers=headers, **changed)
            assert refused.status_code == 422, (url, refused.text)
        # A drop has no body: the same key is always the same drop.
        drops = [
            await http.delete("/enrollments/e-1", headers=idem("drop-1", key)) for _ in range(2)
        ]
        assert drops[0].json() == drops[1].json()


async def test_a_retry_in_another_process_or_after_a_restart_gets_the_same_ids(
    tmp_path: Path,
) -> None:
    processes = [Api(tmp_path) for _ in range(3)]  # one key file; nothing else shared
    key = processes[0].key("commands")
    answers = []
    for process, body in zip(
        processes, (ORDER, ORDER, ORDER | {"customer_id": "c-9"}), strict=True
    ):
        async with process.client() as http:
            answers.append(await place(http, body, idem("k-7", key)))
    # The third process never saw the key: it cannot tell the body changed. It answers with
    # the first request's ids, and the command it sends carries the first's message id,
    # which the worker drops: the first body wins, and there is never a second order.
    assert answers[0].json() == answers[1].json() == answers[2].json()
    sent = [envelope for process in processes for _, envelope in process.bus.sent]
    assert len(sent) == 3 and len({envelope.message_id for envelope in sent}) == 1


async def test_an_order_id_is_computed_only_with_the_callers_api_key(api: Api) -> None:
    key = api.key("commands")
    async with api.client() as http:
        order_id = (await place(http, ORDER, idem("guess-me", key))).json()["order_id"]
    # Its holder can compute it (a client following an order whose 202 it lost) ...
    assert order_id == new_entity_id(f"{idempotency_namespace(key)}/order", "guess-me")
    # ... no one else can: not from the Idempotency-Key and the key's public id.
    key_id = key.split("_")[1]
    for scope in ("order", "order/c-1", f"{key_id}/order", f"order/{key_id}"):
        assert order_id != new_entity_id(scope, "guess-me")


async def test_with_auth_off_keys_are_shared_by_every_caller(tmp_path: Path) -> None:
    api = Api(tmp_path, api_auth=False)
    async with api.client() as http:
        first = await place(http, ORDER, {"Idempotency-Key": "open-1"} | FAST)
        again = await place(http, ORDER, {"Idempotency-Key": "open-1"} | SLOW)
        changed = ORDER | {"customer_id": "c-2"}
        other = await place(http, changed, {"Idempotency-Key": "open-1"} | FAST)
    assert first.json() == again.json()
    assert other.status_code == 422


def test_the_memory_keeps_the_most_recently_used_keys() -> None:
    remembered = Remembered(capacity=2)
    three, four = StockRequest(on_hand=3), StockRequest(on_hand=4)
    ids = remembered.claim("ns", "stock/p", "a", three)
    remembered.claim("ns", "stock/p", "b", three)
    assert remembered.claim("ns", "stock/p", "a", three) == ids  # "a" used last now
    remembered.claim("ns", "stock/p", "c", three)  # past the capacity: "b" is forgotten
    with pytest.raises(Exception, match="different request body"):
        remembered.claim("ns", "stock/p", "a", four)
    assert remembered.claim("ns", "stock/p", "b", four).entity() == new_entity_id("ns/stock/p", "b")
    # Without a key every request is new: random ids, nothing remembered.
    assert remembered.claim("ns", "stock/p", None, three) != ids
