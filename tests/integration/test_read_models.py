"""The read side end to end on PostgreSQL and SQLite: REST command -> Kafka -> worker ->
domain events -> projector -> database -> GET routes, with consistency tokens.

One worker serves both backends; each backend gets a fresh migrated database, its own
projector (in this process) and an API that runs its real lifespan.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi import FastAPI

from readside.migrate import is_migrated
from readside.schema import metadata
from runtime.settings import Settings
from runtime.topics import create_topics
from sagas.projections.listing import customer_history
from sagas.projections.orders import OrderRow
from services.api.app import create_api
from services.keys import add_key
from services.projector.runner import Projector
from tests.integration.harness import Worker, auth_headers, broker_reachable, isolated_settings
from tests.integration.readside import BACKENDS, fresh_database, read_engine

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

FINAL_WAIT = "wait=30"


@dataclass
class ReadSide:
    backend: str
    settings: Settings
    api: FastAPI
    http: httpx.AsyncClient

    async def set_stock(self, product: str, on_hand: int) -> str:
        response = await self.http.put(f"/products/{product}/stock", json={"on_hand": on_hand})
        assert response.status_code == 202, response.text
        token: str = response.json()["consistency_token"]
        return token

    async def place(
        self, product: str, quantity: int = 1, method: str = "card", customer: str = "c1"
    ) -> tuple[str, str]:
        body = {
            "customer_id": customer,
            "lines": [{"product_id": product, "quantity": quantity, "unit_price": "12.50"}],
            "payment": {"method": method},
        }
        response = await self.http.post("/orders", json=body)
        assert response.status_code == 202, response.text
        return response.json()["order_id"], response.json()["consistency_token"]

    async def eventually(
        self, path: str, until: Callable[[dict[str, Any]], bool], timeout: float = 10
    ) -> dict[str, Any]:
        """GET ``path`` until its body satisfies ``until`` (for effects on other entities,
        which the projector applies from other partitions)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            body: dict[str, Any] = (await self.http.get(path)).json()
            if until(body) or asyncio.get_running_loop().time() > deadline:
                return body
            await asyncio.sleep(0.1)

    async def final_order(self, order_id: str, token: str) -> dict[str, Any]:
        response = await self.http.get(f"/orders/{order_id}?consistency_token={token}&{FINAL_WAIT}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert body["final"], body
        return body


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Worker]:
    assert broker_reachable(), "no Kafka broker: start it with `deploy/local/kafka.sh start`"
    tmp = tmp_path_factory.mktemp("read-models")
    settings = isolated_settings(tmp)
    await create_topics(settings)
    worker = Worker(settings, tmp)
    await asyncio.to_thread(worker.start)
    yield worker
    await asyncio.to_thread(worker.stop)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def side(
    request: pytest.FixtureRequest, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ReadSide]:
    backend: str = request.param
    tmp = tmp_path_factory.mktemp(backend)
    with fresh_database(backend, tmp) as url, read_engine(url) as engine:
        settings = worker.settings.model_copy(
            update={"database_url": url, "app_id": f"{worker.settings.app_id}-{backend}"}
        )
        stop = asyncio.Event()
        projector = asyncio.create_task(Projector(settings, engine).run(stop))
        api = create_api(settings)
        transport = httpx.ASGITransport(app=api)
        try:
            async with (
                api.router.lifespan_context(api),
                httpx.AsyncClient(
                    transport=transport, base_url="http://api", headers=auth_headers(settings)
                ) as http,
            ):
                yield ReadSide(backend, settings, api, http)
        finally:
            stop.set()
            await projector


async def test_the_migrations_create_exactly_the_declared_schema(side: ReadSide) -> None:
    def ours(name: str | None, type_: str, parents: dict[str, str | None]) -> bool:
        # Other packages' tables (the Spark rebuild's) are compared by their own tests.
        if type_ == "schema":
            return True
        table = name if type_ == "table" else parents.get("table_name")
        return table in metadata.tables

    with read_engine(side.settings.database_url) as engine, engine.connect() as conn:
        options = {"compare_type": True, "include_name": ours}
        context = MigrationContext.configure(conn, opts=options)
        assert compare_metadata(context, metadata) == []


def db_upgrade(database_url: str) -> subprocess.CompletedProcess[str]:
    """``sagaline db upgrade`` against ``database_url``, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "sagaline.cli", "db", "upgrade"],
        env=dict(os.environ, SAGALINE_DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_db_upgrade_command_migrates_and_can_run_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sub' / 'read.db'}"
    for _ in range(2):  # the second run finds the schema at head and changes nothing
        done = db_upgrade(url)
        assert done.returncode == 0, done.stderr
        assert "is at head" in done.stdout
    with read_engine(url) as engine:
        assert is_migrated(engine)


async def test_a_database_nobody_answers_is_said_in_one_sentence() -> None:
    # sagaline/cli.py ``Commands``: one sentence, the password masked, no traceback.
    done = db_upgrade("postgresql+psycopg://u:secret@127.0.0.1:1/d")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "secret" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "Error: cannot use the read-model database at postgresql+psycopg://u:***@127.0.0.1:1/d: "
        "connection failed: "
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_a_placed_order_is_readable_with_its_token_and_ends_confirmed(
    side: ReadSide,
) -> None:
    stock_token = await side.set_stock("apple", 10)
    stock = await side.http.get(f"/products/apple/stock?consistency_token={stock_token}")
    assert stock.status_code == 200, stock.text
    assert (stock.json()["on_hand"], stock.json()["available"]) == (10, 10)
    order_id, token = await side.place("apple", 3)
    # Read-your-writes: with the token, the order is there at once (never a 404).
    first = await side.http.get(f"/orders/{order_id}", headers={"X-Consistency-Token": token})
    assert first.status_code == 200, first.text
    assert first.json()["customer_id"] == "c1"
    order = await side.final_order(order_id, token)
    assert (order["status"], order["reason"], order["total"]) == ("CONFIRMED", None, "37.50")
    assert order["lines"] == [{"product_id": "apple", "quantity": 3, "unit_price": "12.50"}]
    timeline = (await side.http.get(f"/sagas/{order_id}")).json()
    assert (timeline["status"], timeline["final"]) == ("CONFIRMED", True)
    assert [s["event_type"] for s in timeline["steps"]] == [
        "order.Placed",  # which says PENDING (no status event repeats it)
        "ledger.Reserved",
        "order.StatusChanged",
        "payment.Authorized",
        "order.StatusChanged",
        "ledger.Confirmed",
        "order.StatusChanged",
        "payment.Captured",
        "order.StatusChanged",
    ]
    sold = await side.eventually("/products/apple/stock", lambda b: b["reserved"] == 0)
    assert (sold["on_hand"], sold["reserved"], sold["available"]) == (7, 0, 7)


async def test_failed_sagas_say_why_in_the_order_and_the_timeline(side: ReadSide) -> None:
    await side.set_stock("fig", 1)
    rejected, token = await side.place("fig", 2)
    order = await side.final_order(rejected, token)
    assert order["status"] == "REJECTED" and "out of stock: fig" in order["reason"]
    declined, token = await side.place("fig", 1, method="decline")
    order = await side.final_order(declined, token)
    assert order["status"] == "CANCELLED" and "payment declined" in order["reason"]
    # The compensation (the inventory's release) lands after the order's final status.
    released = "released 1 (cancelled)"
    timeline = await side.eventually(
        f"/sagas/{declined}", lambda b: any(s["summary"] == released for s in b["steps"])
    )
    summaries = [s["summary"] for s in timeline["steps"]]
    assert any(s.startswith("payment declined") for s in summaries)
    assert released in summaries, summaries


async def test_wait_returns_at_a_final_status_or_at_the_deadline(side: ReadSide) -> None:
    await side.set_stock("pear", 5)
    order_id, _ = await side.place("pear")
    # No token: ?wait= also covers the order's first appearance.
    done = await side.http.get(f"/orders/{order_id}?wait=30")
    assert (done.status_code, done.json()["status"]) == (200, "CONFIRMED")
    stuck_id, token = await side.place("pear", method="hang")  # the gateway never answers
    started = asyncio.get_running_loop().time()
    stuck = await side.http.get(f"/orders/{stuck_id}?consistency_token={token}&wait=1")
    assert 0.9 < asyncio.get_running_loop().time() - started < 5
    assert (stuck.status_code, stuck.json()["final"]) == (200, False)


async def test_a_customer_history_lists_the_newest_orders_first(side: ReadSide) -> None:
    await side.set_stock("kiwi", 20)
    customer = f"hist-{side.backend}"
    placed = [await side.place("kiwi", customer=customer) for _ in range(4)]
    orders = [await side.final_order(order_id, token) for order_id, token in placed]
    response = await side.http.get(f"/customers/{customer}/orders?limit=3")
    assert response.status_code == 200, response.text
    listed = [o["order_id"] for o in response.json()["orders"]]
    rows = [OrderRow.model_validate(o | {"lines": tuple(o["lines"])}) for o in orders]
    assert listed == [r.order_id for r in customer_history(rows, customer, limit=3)]
    assert set(listed) < {order_id for order_id, _ in placed}


async def test_unknown_ids_answer_404_with_a_clear_body(side: ReadSide) -> None:
    for path, what in [
        ("/orders/nope", "order 'nope' not found"),
        ("/customers/nobody/orders", "orders of customer 'nobody' not found"),
        ("/products/nothing/stock", "stock of product 'nothing' not found"),
        ("/sagas/none", "saga 'none' not found"),
    ]:
        response = await side.http.get(path)
        assert response.status_code == 404, path
        assert response.json()["message"].startswith(what)


async def test_a_token_the_projector_has_not_applied_is_a_504_naming_the_lag(
    side: ReadSide,
) -> None:
    never = "cmd-" + "0" * 32
    response = await side.http.get(f"/products/apple/stock?consistency_token={never}&wait=0.2")
    assert response.status_code == 504
    assert "has not caught up" in response.json()["message"]
    assert "current lag: " in response.json()["message"]
    malformed = await side.http.get("/products/apple/stock?consistency_token=whatever")
    assert malformed.status_code == 422


async def test_projection_status_reports_applied_and_end_offsets(side: ReadSide) -> None:
    await side.set_stock("status", 1)
    status = await side.eventually("/projections/status", lambda b: b["total_lag"] == 0)
    assert status["total_lag"] == 0
    assert len(status["partitions"]) == side.settings.partitions
    for partition in status["partitions"]:
        assert partition["applied_offset"] == partition["end_offset"]
        assert partition["lag"] == 0
    assert status["counters"]["applied"] > 0
    assert (status["held_events"], status["gap_alert"]) == (0, False)


async def test_a_thousand_concurrent_reads_with_tokens_finish_and_leave_no_waiters(
    side: ReadSide,
) -> None:
    token = await side.set_stock("crowd", 42)
    path = f"/products/crowd/stock?consistency_token={token}&wait=20"
    responses = await asyncio.gather(*(side.http.get(path) for _ in range(1000)))
    assert {r.status_code for r in responses} == {200}
    assert {r.json()["on_hand"] for r in responses} == {42}
    never = "cmd-" + "f" * 32
    late = await asyncio.gather(
        *(side.http.get(f"/sagas/x?consistency_token={never}&wait=0.2") for _ in range(200))
    )
    assert {r.status_code for r in late} == {504}
    assert side.api.state.watch.open_slots == 0


async def test_the_openapi_document_names_every_model(side: ReadSide) -> None:
    document = (await side.http.get("/openapi.json")).json()
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            success = next(r for code, r in operation["responses"].items() if code < "300")
            assert "$ref" in success["content"]["application/json"]["schema"], (method, path)
            if "requestBody" in operation:  # a command that takes a body says its model
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert "$ref" in json.dumps(body), (method, path)
            if method == "get" and "{" in path:
                assert {"404", "503"} <= operation["responses"].keys(), path
                tokens = any(p["name"] == "consistency_token" for p in operation["parameters"])
                assert tokens <= ("504" in operation["responses"]), path  # a token may time out
    schemas = document["components"]["schemas"]
    # By name, the order domain's and the kernel's: every domain's routes are held to a named
    # model by the loop above.
    for name in [
        "OrderPublic",
        "CustomerOrders",
        "StockPublic",
        "TimelinePublic",
        "ProjectionStatus",
        "ErrorBody",
        "OrderAccepted",
        "OrderRequest",
    ]:
        assert name in schemas, name
    assert "consistency_token" in schemas["OrderAccepted"]["properties"]


async def test_every_route_serves_a_key_of_its_scope_and_no_other(side: ReadSide) -> None:
    """With real rows behind the queries: 2xx with a key of the route's scope, 403 with a
    key of the other scope, 401 without one."""
    keys = side.settings.api_keys_file
    reader = {"Authorization": f"Bearer {add_key(keys, ['read'], 'reader')[0]}"}
    writer = {"Authorization": f"Bearer {add_key(keys, ['commands'], 'writer')[0]}"}
    product, customer = f"scoped-{side.backend}", f"scoped-{side.backend}"
    line = {"product_id": product, "quantity": 1, "unit_price": "1.00"}
    order = {"customer_id": customer, "lines": [line], "payment": {"method": "card"}}
    commands = [
        ("PUT", f"/products/{product}/stock", {"on_hand": 3}),
        ("POST", "/orders", order),
    ]
    answers = [
        await side.http.request(method, path, json=body, headers=writer)
        for method, path, body in commands
    ]
    assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
    order_id, token = answers[1].json()["order_id"], answers[1].json()["consistency_token"]
    cancel = await side.http.post(f"/orders/{order_id}/cancel", headers=writer)
    assert cancel.status_code == 202, cancel.text
    queries = [
        f"/orders/{order_id}?consistency_token={token}&{FINAL_WAIT}",
        f"/customers/{customer}/orders?consistency_token={token}",
        f"/products/{product}/stock?consistency_token={token}",
        f"/sagas/{order_id}?consistency_token={token}",
        "/projections/status",
    ]
    for path in queries:
        response = await side.http.get(path, headers=reader)
        assert response.status_code == 200, (path, response.text)
    transport = httpx.ASGITransport(app=side.api)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as anonymous:
        for method, path, body in [*commands, ("POST", f"/orders/{order_id}/cancel", None)]:
            assert (await anonymous.request(method, path, json=body)).status_code == 401
            refused = await anonymous.request(method, path, json=body, headers=reader)
            assert refused.status_code == 403 and "'commands' scope" in refused.text
        for path in queries:
            assert (await anonymous.get(path)).status_code == 401
            refused = await anonymous.get(path, headers=writer)
            assert refused.status_code == 403 and "'read' scope" in refused.text
