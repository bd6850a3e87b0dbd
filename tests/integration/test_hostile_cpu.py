"""No input can freeze a component, on the real stack (issue 24).

Inputs crafted for worst-case CPU (faults.fuzz.REVIEW_SHAPES: escaped quotes in an
unterminated string after many brackets, bracket and digit runs, many keys...), not merely
malformed ones:

- the API, a real ``sagaline api`` process: 50 concurrent 64 KB hostile bodies without a
  key are answered 401 within 100 ms each while ``/healthz``, polled every 50 ms, answers
  within 100 ms every time; the same bodies with a valid key are answered 400 as fast;
- the worker (CDC on, so every topic it consumes has its process) and a projector process:
  the 512 KiB fill of every shape on every topic they consume; an order placed right
  after completes within 2 s and shows in the read model, and the worker's log shows no
  heartbeat expiry and no rebalance after the records arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from sqlalchemy import Engine

from faults.fuzz import REVIEW_SHAPES, filled
from readside import store
from runtime.topics import EVENTS, PROCESS_CHANNELS, create_topics, external_topics
from sagas.projections.orders import ORDERS
from sagas.untrusted import MAX_RECORD_BYTES
from tests.integration.harness import (
    ServiceProcess,
    Stack,
    auth_headers,
    free_port,
    isolated_settings,
    running_stack,
)
from tests.integration.readside import ProjectorProcess, fresh_database, read_engine

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BOUND_S = 0.100
HOSTILE_BODIES = 50
REBALANCE_MARKS = (
    "rebalanc",
    "heartbeat session expired",
    "heartbeat failed",
    "joining group",
    "revoking previously assigned",
)
"""Lines of aiokafka's and Faust's logs that a group rejoin writes (lower case)."""


class Api(ServiceProcess):
    command = "api"
    ready_marker = None  # waited for by its port


def _bodies(size: int) -> list[bytes]:
    shapes = list(REVIEW_SHAPES.values())
    return [filled(shapes[i % len(shapes)], size).expand() for i in range(HOSTILE_BODIES)]


async def _timed(request: Awaitable[httpx.Response]) -> tuple[float, int]:
    started = time.perf_counter()
    response = await request
    return time.perf_counter() - started, response.status_code


async def _poll_health(http: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        took, status = await _timed(http.get("/healthz"))
        assert status == 200
        latencies.append(took)
        await asyncio.sleep(0.050)
    return latencies


async def _hostile_round(
    url: str, headers: dict[str, str]
) -> tuple[list[tuple[float, int]], list[float]]:
    """The bodies sent at once, each on its own connection, while /healthz is polled on
    another: (latency, status) of each body, and every /healthz latency."""
    bodies = _bodies(64 * 1024)
    limits = httpx.Limits(max_connections=HOSTILE_BODIES + 1)
    async with (
        httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http,
        httpx.AsyncClient(base_url=url, timeout=30) as health,
    ):
        await http.get("/healthz")  # connections warm; not part of the measure
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll_health(health, stop))
        await asyncio.sleep(0.2)
        sent = [
            _timed(
                http.post(
                    "/orders",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                )
            )
            for body in bodies
        ]
        answers = await asyncio.gather(*sent)
        await asyncio.sleep(0.2)
        stop.set()
        return answers, await poller


async def test_hostile_bodies_are_answered_at_once_and_never_hold_the_api(tmp_path: Path) -> None:
    settings = isolated_settings(
        tmp_path, api_port=free_port(), database_url=f"sqlite:///{tmp_path}/read.db"
    )
    await create_topics(settings)
    api = Api(settings, tmp_path)
    api.start()
    url = f"http://{settings.api_host}:{settings.api_port}"
    try:
        await _wait_for_port(url, api)
        answers, health = await _hostile_round(url, {})
        assert {status for _, status in answers} == {401}, api.tail_log()
        assert max(took for took, _ in answers) <= BOUND_S, sorted(t for t, _ in answers)[-5:]
        assert len(health) >= 4 and max(health) <= BOUND_S, sorted(health)[-5:]

        key = auth_headers(settings)
        async with httpx.AsyncClient(base_url=url, headers=key) as http:
            known = await http.get("/orders/none-yet")  # the key verified once, as any client's
            assert known.status_code not in (401, 403), known.text
        answers, health = await _hostile_round(url, key)
        assert {status for _, status in answers} == {400}, api.tail_log()
        assert max(took for took, _ in answers) <= BOUND_S, sorted(t for t, _ in answers)[-5:]
        assert max(health) <= BOUND_S, sorted(health)[-5:]
    finally:
        api.stop()


async def _wait_for_port(url: str, api: ServiceProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url) as http:
        while time.monotonic() < deadline:
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert api.alive(), api.tail_log()
            await asyncio.sleep(0.2)
    raise AssertionError(f"the API never answered:\n{api.tail_log()}")


# --- the worker and the projector ---------------------------------------------------------


@dataclass
class World:
    stack: Stack
    engine: Engine
    projector: ProjectorProcess
    log_offset: int
    """Where the worker's log stood when the hostile records were sent."""


async def _send_worst_cases(stack: Stack) -> int:
    """The 512 KiB fill of every shape on every topic the worker and projector consume."""
    settings = stack.settings
    topics = [settings.topic(c) for c in (*PROCESS_CHANNELS, EVENTS)]
    topics += [spec.name for spec in external_topics(settings)]
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, max_request_size=2 * 1024 * 1024, acks="all"
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, filled(shape, MAX_RECORD_BYTES).expand(), key=b"hostile")
            for topic in topics
            for shape in REVIEW_SHAPES.values()
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(futures)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("hostile")
    settings = isolated_settings(tmp, cdc_enabled=True)
    settings = settings.model_copy(update={"cdc_topic_prefix": f"{settings.topic_prefix}-legacy"})
    await create_topics(settings, external_topics(settings))
    async with running_stack(settings, tmp) as stack:
        with fresh_database("postgresql", tmp) as url, read_engine(url) as engine:
            projector = ProjectorProcess(
                stack.settings.model_copy(update={"database_url": url}), Path(tmp)
            )
            projector.start()
            try:
                await stack.set_stock("calm", 10)
                warm = await stack.place([("calm", 1)])
                await stack.tail.wait_for([warm], 60)
                await _order_row(engine, warm, 60)
                offset = stack.worker.log.stat().st_size
                await _send_worst_cases(stack)
                yield World(stack, engine, projector, offset)
            finally:
                projector.stop()


async def _order_row(engine: Engine, order_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            row = store.load_rows(conn, ORDERS, [order_id]).get(order_id)
        if row is not None and row.status == "CONFIRMED":
            return row.status
        await asyncio.sleep(0.05)
    raise AssertionError(f"order {order_id} not CONFIRMED in the read model in {timeout} s")


@pytest.mark.asyncio(loop_scope="module")
async def test_an_order_right_after_the_worst_records_completes_within_two_seconds(
    world: World,
) -> None:
    started = time.monotonic()
    order = await world.stack.place([("calm", 1)])
    outcome = (await world.stack.tail.wait_for([order], 2.0))[order]
    assert outcome.status == "CONFIRMED", outcome
    assert await _order_row(world.engine, order, 2.0 - (time.monotonic() - started))
    assert world.projector.alive(), world.projector.tail_log()


@pytest.mark.asyncio(loop_scope="module")
async def test_the_worker_never_missed_a_heartbeat_nor_rebalanced(world: World) -> None:
    await asyncio.sleep(3)  # past a heartbeat interval after the records were decided
    with open(world.stack.worker.log, "rb") as log:
        log.seek(world.log_offset)
        after = log.read().decode(errors="replace").lower()
    found = [mark for mark in REBALANCE_MARKS if mark in after]
    assert not found, (found, after[-3000:])
    assert world.stack.worker.alive()
