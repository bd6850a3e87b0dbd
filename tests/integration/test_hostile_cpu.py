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
import gc
import time
from collections.abc import AsyncIterator
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
)
from tests.integration.readside import ProjectorProcess, every_consumer

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


@dataclass(frozen=True)
class Answer:
    shape: str
    seconds: float
    status: int


class RawConnection:
    """One keep-alive HTTP/1.1 connection driven with bare asyncio streams: the test's own
    client costs next to nothing per request (httpx's per-request work, 50 at once on two
    cores, was most of what a first version measured)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> RawConnection:
        return cls(*await asyncio.open_connection(host, port))

    async def request(self, head: str, body: bytes = b"") -> tuple[float, int]:
        """(seconds to the status line, status); the rest of the answer is read after."""
        started = time.perf_counter()
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        took = time.perf_counter() - started
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return took, int(status_line.split()[1])

    def close(self) -> None:
        self.writer.close()


def _post(body: bytes, headers: dict[str, str]) -> str:
    lines = [
        "POST /orders HTTP/1.1",
        "Host: api",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return "\r\n".join(lines) + "\r\n\r\n"


async def _poll_health(conn: RawConnection, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        took, status = await conn.request("GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n")
        assert status == 200
        latencies.append(took)
        await asyncio.sleep(0.050)
    return latencies


async def _hostile_round(
    host: str, port: int, headers: dict[str, str]
) -> tuple[list[Answer], list[float]]:
    """50 bodies of 64 KB (the review's shapes in turn) sent at once, each on a connection
    of its own opened beforehand, while /healthz is polled on another."""
    names = list(REVIEW_SHAPES)
    bodies = [
        (names[i % len(names)], filled(REVIEW_SHAPES[names[i % len(names)]], 64 * 1024).expand())
        for i in range(HOSTILE_BODIES)
    ]
    conns = [await RawConnection.open(host, port) for _ in range(HOSTILE_BODIES + 1)]
    collector = gc.isenabled()
    gc.disable()  # the driver's own collections are not the API's latency
    try:
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll_health(conns[-1], stop))
        await asyncio.sleep(0.2)

        async def send(conn: RawConnection, shape: str, body: bytes) -> Answer:
            return Answer(shape, *await conn.request(_post(body, headers), body))

        answers = await asyncio.gather(
            *(send(conn, shape, body) for conn, (shape, body) in zip(conns, bodies, strict=False))
        )
        await asyncio.sleep(0.2)
        stop.set()
        return answers, await poller
    finally:
        if collector:
            gc.enable()
        for conn in conns:
            conn.close()


def _slowest(answers: list[Answer]) -> list[Answer]:
    return sorted(answers, key=lambda a: -a.seconds)[:5]


async def test_hostile_bodies_are_answered_at_once_and_never_hold_the_api(tmp_path: Path) -> None:
    settings = isolated_settings(
        tmp_path, api_port=free_port(), database_url=f"sqlite:///{tmp_path}/read.db"
    )
    await create_topics(settings)
    api = Api(settings, tmp_path)
    api.start()
    host, port = settings.api_host, settings.api_port
    try:
        await _wait_for_port(f"http://{host}:{port}", api)
        answers, health = await _hostile_round(host, port, {})
        assert {a.status for a in answers} == {401}, api.tail_log()
        assert max(a.seconds for a in answers) <= BOUND_S, _slowest(answers)
        assert len(health) >= 4 and max(health) <= BOUND_S, sorted(health)[-5:]

        key = auth_headers(settings)
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", headers=key) as http:
            known = await http.get("/orders/none-yet")  # the key verified once, as any client's
            assert known.status_code not in (401, 403), known.text
        answers, health = await _hostile_round(host, port, key)
        # Not JSON (400), or JSON that is no order (422: "many keys", "long escapes"); the
        # review's own shape is a 400.
        assert {a.status for a in answers} <= {400, 422}, api.tail_log()
        assert {a.status for a in answers if "escaped" in a.shape} == {400}
        assert max(a.seconds for a in answers) <= BOUND_S, _slowest(answers)
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
    async with every_consumer(tmp_path_factory.mktemp("hostile")) as (stack, engine, projector):
        await stack.set_stock("calm", 10)
        warm = await stack.place([("calm", 1)])
        await stack.tail.wait_for([warm], 60)
        await _order_row(engine, warm, 60)
        offset = stack.worker.log.stat().st_size
        await _send_worst_cases(stack)
        yield World(stack, engine, projector, offset)


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
