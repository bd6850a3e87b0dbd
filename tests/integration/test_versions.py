"""Versions on the real broker: orders started under version 1, the worker restarted with
version 2 code that keeps version 1: the version-1 orders finish by version 1's rules and
new ones start on version 2; then version 3, which declares the upgrade from version 1,
continues a version-1 order on its rules, its stored state upgraded (version 3's ``wallet``),
while the version-2 orders finish by version 2's rules (their step times out), after which
``sagaline versions`` says version 2 can be deleted and version 1 (one instance left, not yet
upgraded) cannot."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from benchmarks.common import delete_run_topics
from runtime.settings import Settings
from runtime.topics import create_topics
from sagas.catalog import INVENTORY, ORDER_SAGA
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.machinery.history import is_chunk_key
from sagas.machinery.record import Record
from sagas.messages import Envelope, Message
from services.api.app import create_api
from services.api.inflight import in_flight_of
from services.bus import CommandBus
from services.event_tail import EventTail
from services.inflight import OWN_KEY, read_changelog
from tests.integration.harness import (
    ServiceProcess,
    _die_with_parent,
    auth_headers,
    isolated_settings,
    settings_env,
)
from tests.integration.versioned_cli import CODE
from tests.unit.versions_example import OrderStateV3

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).parents[2]
TIMEOUT_S = 30.0
"""The step timeout of the worker at version 2 (the others: 900 s, none fires)."""
HELD_S = 900.0
"""The other workers' step timeout and the stock reservation's TTL: longer than the whole
test on a slow box, so that the version-1 orders that must stay in AUTHORIZING neither time
out nor lose their reservation (its expiry cancels them) while version 3 runs."""


class VersionedWorker(ServiceProcess):
    """``sagaline worker`` with the order saga at ``version`` (versioned_cli.py)."""

    ready_marker = "Ready"

    def __init__(self, settings: Settings, log_dir: Path, version: str) -> None:
        super().__init__(settings, log_dir)
        self.version = version

    def start(self, timeout: float = 90) -> None:
        self.starts += 1
        self.log = self.log_dir / f"worker-{self.version}-{self.starts}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.versioned_cli", self.version, "worker"],
                env=settings_env(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Ready" in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited:\n{self.tail_log(4000)}")
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready after {timeout}s:\n{self.tail_log(4000)}")


def command(message: Message, key: str) -> Envelope:
    return Envelope.wrap(message, message_id=uuid.uuid4().hex, key=key, saga_id=key,
                         occurred_at=datetime.now(UTC))  # fmt: skip


def place() -> tuple[str, Envelope]:
    """An order the gateway never answers: it rests in AUTHORIZING (no timeout in the test)."""
    order_id = uuid.uuid4().hex[:12]
    line = oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal("3.00"))
    cmd = oc.PlaceOrder(customer_id="c1", lines=(line,), payment=oc.PaymentDetails(method="hang"))
    return order_id, command(cmd, order_id)


class Orders:
    def __init__(self, bus: CommandBus, tail: EventTail) -> None:
        self.bus, self.tail = bus, tail

    async def authorizing(self, n: int) -> list[str]:
        placed = [place() for _ in range(n)]
        await self.bus.send_many([(ORDER_SAGA, env) for _, env in placed])
        ids = [order_id for order_id, _ in placed]
        for order_id in ids:
            await self.status(order_id, "AUTHORIZING")
        return ids

    async def cancel(self, order_id: str) -> None:
        await self.bus.send(ORDER_SAGA, command(oc.CancelOrder(reason="changed mind"), order_id))

    async def status(
        self, order_id: str, wanted: str, timeout: float = 30, reason: str | None = None
    ) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            got = self.tail.statuses.get(f"order:{order_id}")
            if got is not None and got.status == wanted and reason in (None, got.reason):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"order {order_id} is not {wanted}: {self.tail.statuses.get(f'order:{order_id}')}"
        )

    async def refused(self, order_id: str, timeout: float = 30) -> str:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            found = [
                e
                for e in self.tail.events_of(f"order:{order_id}")
                if e.type == oc.CancelRefused.TYPE
            ]
            if found:
                return str(found[0].payload["reason"])
            await asyncio.sleep(0.1)
        raise AssertionError(f"order {order_id}: no cancel refused")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Settings, Path, Orders]]:
    tmp = tmp_path_factory.mktemp("versions")
    settings = isolated_settings(
        tmp, step_timeout_s=HELD_S, reservation_ttl_s=HELD_S, payment_silent_methods="hang"
    )
    await create_topics(settings)
    bus, tail = CommandBus(settings), EventTail(settings, from_beginning=True)
    await bus.start()
    await tail.start()
    try:
        await bus.send(INVENTORY, command(lc.SetCapacity(on_hand=1000), "p1"))
        yield settings, tmp, Orders(bus, tail)
    finally:
        await tail.stop()
        await bus.stop()
        await delete_run_topics(settings)


def versions_said(settings: Settings, version: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.versioned_cli", version, "versions"],
        env=settings_env(settings), capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def stored(settings: Settings, version: str) -> dict[str, Record[Any]]:
    """The order saga's records as the worker's table holds them, read from its changelog
    and decoded as the worker at ``version`` reads them."""
    domain = CODE[version]
    assert domain is not None
    process = next(p for p in domain.build(settings) if p.name == ORDER_SAGA)
    table = await read_changelog(settings, ORDER_SAGA)
    codec = Record.codec(process.state_type)
    return {
        key: codec.decode(key, raw, table.get)
        for key, raw in table.items()
        if not key.startswith(OWN_KEY) and not is_chunk_key(key)
    }


def order_saga_lines(said: str) -> list[str]:
    """What ``sagaline versions`` says of the order saga (other channels follow it)."""
    lines = said.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"{ORDER_SAGA}:")))
    return [lines[at], *itertools.takewhile(lambda line: line.startswith("  "), lines[at + 1 :])]


async def scrape_in_flight(settings: Settings) -> str:
    """The API's GET /metrics, in process, with the cache its lifespan builds (the reading
    is the same at any version: it counts the version each record holds)."""
    app = create_api(settings, bus=object())  # type: ignore[arg-type]
    app.state.in_flight = in_flight_of(settings, app.state.prometheus, wait_s=60)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        response = await client.get("/metrics", headers=auth_headers(settings))
    assert response.status_code == 200, response.text
    return response.text


async def test_a_restart_on_version_2_finishes_version_1_orders_by_version_1_then_3_upgrades_them(
    stack: tuple[Settings, Path, Orders],
) -> None:
    settings, tmp, orders = stack
    worker = VersionedWorker(settings, tmp, "v1")
    await asyncio.to_thread(worker.start)
    try:
        old = await orders.authorizing(3)
    finally:
        worker.stop()

    # the worker restarted with version 2 beside version 1, with a step timeout that the
    # new orders' authorizations outlast once it has stopped (the worker at version 3
    # fires it): they finish by version 2's rules
    worker = VersionedWorker(settings.model_copy(update={"step_timeout_s": TIMEOUT_S}), tmp, "v2")
    await asyncio.to_thread(worker.start)
    try:
        new = await orders.authorizing(2)
        await orders.cancel(old[0])  # version 1 takes a cancel while authorizing
        await orders.status(old[0], "CANCELLED")
        await orders.cancel(new[0])  # version 2 does not
        assert "version 2" in await orders.refused(new[0])
        await asyncio.sleep(2)  # the batch's states reach the changelog
    finally:
        worker.stop()
    said = versions_said(settings, "v2")
    assert "version 1: 2 in flight: keep it" in said, said
    assert "version 2: 2 in flight (new instances start here)" in said, said
    scraped = await scrape_in_flight(settings)
    assert 'sagaline_sagas_in_flight{saga_type="order",version="1"} 2.0' in scraped, scraped
    assert 'sagaline_sagas_in_flight{saga_type="order",version="2"} 2.0' in scraped, scraped

    # version 3 declares the upgrade from version 1: old orders continue on its rules
    worker = VersionedWorker(settings, tmp, "v3")
    await asyncio.to_thread(worker.start)
    try:
        await orders.cancel(old[1])
        assert "version 2" in await orders.refused(old[1])
        await orders.status(old[1], "AUTHORIZING")
        for order_id in new:  # version 2's last instances time out by version 2's rules
            await orders.status(order_id, "CANCELLED", timeout=TIMEOUT_S + 90, reason="timeout")
        await asyncio.sleep(2)  # the batch's states reach the changelog
    finally:
        worker.stop()
    records = await stored(settings, "v3")
    upgraded, untouched = records[old[1]], records[old[2]]
    assert (upgraded.version, type(upgraded.state)) == (3, OrderStateV3)
    assert upgraded.state.status == "AUTHORIZING"
    assert upgraded.state.wallet == "other"  # paid by "hang"
    assert (untouched.version or 1, type(untouched.state).__name__) == (1, "OrderState")
    assert [records[o].state.status for o in new] == ["CANCELLED", "CANCELLED"]
    assert order_saga_lines(versions_said(settings, "v3")) == [
        "order-saga: newest version 3",
        "  version 1: 1 in flight: keep it",
        "  version 2: none in flight: it can be deleted",
        "  version 3: 1 in flight (new instances start here)",
    ]
