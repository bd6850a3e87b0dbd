"""Real Kafka for tests: isolated topic sets, worker subprocesses, the API in-process."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from faults import checks
from faults.history import History
from faults.topics import Raw, read_topic
from readside.engine import create_read_engine
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from sagas.contracts.orders import FINAL_STATUSES
from services.api.app import create_api
from services.bus import CommandBus
from services.event_tail import EventTail
from services.keys import ensure_local_key
from services.projector.runner import Projector

BOOTSTRAP = os.environ.get("SAGALINE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def broker_reachable() -> bool:
    host, port = BOOTSTRAP.split(",")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PREFIXES: list[str] = []
"""Every prefix :func:`isolated_settings` gave out: tests/conftest.py deletes their topics
after each test module, so the local broker does not gather partitions run after run (at
~20,000 its log directory runs out of file handles and the broker stops)."""


async def scratch_topic(name: str, partitions: int) -> str:
    """A new topic ``t<run>.<name>`` on the local broker (deleted with the test module's
    topics, :data:`PREFIXES`), for a test of Kafka's own behaviour outside Sagaline's."""
    run = uuid.uuid4().hex[:8]
    PREFIXES.append(f"t{run}")
    topic = f"t{run}.{name}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    return topic


def isolated_settings(tmp: Path, **overrides: Any) -> Settings:
    """Settings with a fresh topic prefix and app id: tests never see each other's records.
    The API asks for keys, as in production: :func:`auth_headers` holds one."""
    run = uuid.uuid4().hex[:8]
    PREFIXES.append(f"t{run}")
    values: dict[str, Any] = {
        "kafka_bootstrap": BOOTSTRAP,
        "topic_prefix": f"t{run}",
        "app_id": f"t{run}",
        "partitions": 4,
        "data_dir": tmp / "worker-data",
        "worker_web_port": free_port(),
        "projector_metrics_port": free_port(),
        "payment_silent_methods": "hang",
        "step_timeout_s": 20.0,
        "reservation_ttl_s": 120.0,
        "log_level": "INFO",
        "api_keys_file": tmp / "api-keys",
        # The tests' histories are dated (2024): the read side's retention would delete
        # their finished sagas while a test reads them. Tests of the retention set it.
        "read_retention_s": 0.0,
    }
    values.update(overrides)
    settings = Settings(**values)
    if settings.api_auth:
        api_key(settings)  # before any API starts: it starts with a key, as in production
    return settings


def api_key(settings: Settings) -> str:
    """A key with every scope for the API of ``settings`` (made once, kept beside its key
    file, as `make run` does)."""
    keys_file = settings.api_keys_file
    return ensure_local_key(keys_file.with_name(keys_file.name + ".key"), keys_file)


def auth_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key(settings)}"}


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the test process dies, however it dies."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def settings_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    for name, value in settings.environment().items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


class ServiceProcess:
    """A ``sagaline`` command as a real process, so a test can SIGKILL it and start it again."""

    command = "worker"
    ready_marker: str | None = "Ready"
    """A line the process logs once it serves; None: do not wait."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 90) -> None:
        self.starts += 1
        self.log = self.log_dir / f"{self.command}-{self.settings.app_id}-{self.starts}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sagaline.cli", self.command],
                env=settings_env(self.settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        if self.ready_marker is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if self.ready_marker in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.command} exited with {self.proc.returncode}:\n{text[-4000:]}"
                )
            time.sleep(0.2)
        raise RuntimeError(f"{self.command} not ready after {timeout}s:\n{self.tail_log(4000)}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no flush, no commit."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail_log(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


class Worker(ServiceProcess):
    """``sagaline worker``: ready once Faust logs that it is."""


class Stack:
    """Topics, a started worker, the API and an event tail for one isolated settings set."""

    def __init__(
        self, settings: Settings, worker: Worker, http: httpx.AsyncClient, tail: EventTail
    ):
        self.settings = settings
        self.worker = worker
        self.http = http
        self.tail = tail

    async def set_stock(self, product: str, on_hand: int) -> None:
        response = await self.http.put(f"/products/{product}/stock", json={"on_hand": on_hand})
        assert response.status_code == 202, response.text
        await self.wait_stock(product, lambda f: f["on_hand"] == on_hand)

    async def place(self, lines: list[tuple[str, int]], method: str = "card", **kw: Any) -> str:
        body = {
            "customer_id": kw.get("customer", "c1"),
            "lines": [{"product_id": p, "quantity": q, "unit_price": "10.00"} for p, q in lines],
            "payment": {"method": method},
        }
        response = await self.http.post("/orders", json=body, headers=kw.get("headers", {}))
        assert response.status_code == 202, response.text
        order_id: str = response.json()["order_id"]
        return order_id

    async def place_steadily(
        self,
        products: list[str],
        count: int,
        lines: dict[str, list[str]],
        *,
        seed: int,
        pause_s: float,
        decline_every: int = 0,
    ) -> list[str]:
        """``count`` orders of one unit of one or two random ``products`` each, one every
        ``pause_s``; every ``decline_every``-th is paid by a declined method. ``lines``
        receives each order's products (what :meth:`assert_settled` checks)."""
        rnd = random.Random(seed)
        orders = []
        for i in range(count):
            picked = rnd.sample(products, rnd.choice([1, 2]))
            method = "decline" if decline_every and i % decline_every == 0 else "card"
            order = await self.place([(p, 1) for p in picked], method=method, customer=f"s{i}")
            lines[order] = picked
            orders.append(order)
            await asyncio.sleep(pause_s)
        return orders

    def stock(self, product: str) -> dict[str, Any] | None:
        """The totals carried by the product's latest ledger event."""
        facts = [e for e in self.tail.events_of(f"product:{product}")]
        return None if not facts else max(facts, key=lambda e: e.sequence or 0).payload

    async def assert_settled(
        self, outcomes: dict[str, Any], lines: dict[str, list[str]], stock: dict[str, int]
    ) -> dict[str, int]:
        """After a crash: no saga contradicts itself (a replay may repeat an event, never
        change it), and every product ends at its stock less the units of CONFIRMED orders
        (one unit per line), nothing reserved. Returns the units sold per product."""
        finals: dict[str, set[str]] = defaultdict(set)
        for e in self.tail.events:
            if e.type == "order.StatusChanged" and e.payload["status"] in FINAL_STATUSES:
                finals[e.saga_id or ""].add(e.payload["status"])
        assert all(len(s) == 1 for s in finals.values())
        sold: dict[str, int] = defaultdict(int)
        for order, outcome in outcomes.items():
            if outcome.status == "CONFIRMED":
                for product in lines[order]:
                    sold[product] += 1
        for product, on_hand in stock.items():
            assert sold[product] <= on_hand
            # A saga publishes its outcome together with its compensations (a refund of a
            # line confirmed before a timeout, say), so the ledger may settle a moment later.
            expected = on_hand - sold[product]
            fact = await self.wait_stock(
                product, lambda f, n=expected: f["reserved"] == 0 and f["on_hand"] == n
            )
            assert (fact["on_hand"], fact["reserved"]) == (expected, 0), product
        return sold

    # --- enrollment (the read routes answer only in a stack with ``projected=True``) ------

    async def set_course(self, course: str, capacity: int, credits: int = 3) -> str:
        """Create or change a course; its consistency token."""
        body = {"title": f"Course {course}", "capacity": capacity, "credits": credits}
        return await self._accepted("PUT", f"/courses/{course}", body)

    async def set_student(self, student: str, max_credits: int = 30) -> str:
        body = {"name": f"Student {student}", "max_credits": max_credits}
        return await self._accepted("PUT", f"/students/{student}", body)

    async def enroll(
        self, student: str, course: str, waitlist: bool = True, key: str | None = None
    ) -> tuple[str, str]:
        """(enrollment id, consistency token)."""
        headers = {} if key is None else {"Idempotency-Key": key}
        body = {"student_id": student, "course_id": course, "waitlist": waitlist}
        response = await self.http.post("/enrollments", json=body, headers=headers)
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "PENDING"
        return response.json()["enrollment_id"], response.json()["consistency_token"]

    async def drop(self, enrollment: str) -> str:
        return await self._accepted("DELETE", f"/enrollments/{enrollment}")

    async def transfer(self, enrollment: str, course: str) -> str:
        body = {"course_id": course}
        return await self._accepted("POST", f"/enrollments/{enrollment}/transfer", body)

    async def enrollment(
        self, enrollment: str, token: str | None = None, wait: float = 30
    ) -> dict[str, Any]:
        """GET /enrollments/{id} after ``token``'s command, once settled (up to ``wait`` s)."""
        params: dict[str, Any] = {"wait": wait}
        if token is not None:
            params["consistency_token"] = token
        response = await self.http.get(f"/enrollments/{enrollment}", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert body["settled"], body
        return body

    async def read(self, path: str, token: str | None = None) -> dict[str, Any]:
        params: dict[str, str | int] = (
            {} if token is None else {"consistency_token": token, "wait": 30}
        )
        response = await self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def eventually(self, path: str, until: Any, timeout: float = 30) -> dict[str, Any]:
        """GET ``path`` until its body satisfies ``until`` (effects the projector applies
        from other entities' partitions); the last body, for the caller's assertion."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            response = await self.http.get(path)
            body: dict[str, Any] = response.json()
            if response.status_code == 200 and until(body):
                return body
            if asyncio.get_running_loop().time() > deadline:
                return body
            await asyncio.sleep(0.1)

    async def _accepted(self, method: str, path: str, body: Any = None) -> str:
        response = await self.http.request(method, path, json=body)
        assert response.status_code == 202, response.text
        token: str = response.json()["consistency_token"]
        return token

    async def assert_enrollments_settled(
        self, enrollment_ids: list[str], timeout: float = 120
    ) -> dict[str, str]:
        """Every enrollment ends settled, and at rest the fault harness's invariants hold on
        the event topic: per course confirmed + held <= capacity at every fact and nothing
        held, credits within max_credits, each ENROLLED enrollment holds exactly one
        confirmed seat (its course's) and any other none. Returns the final statuses."""
        keys = [f"enrollment:{i}" for i in enrollment_ids]
        seen = await self.tail.wait_settled(keys, timeout)
        unsettled = {k: seen[k].status if k in seen else None for k in keys}
        unsettled = {k: s for k, s in unsettled.items() if not self.tail.is_settled(k)}
        assert not unsettled, f"{len(unsettled)} enrollments never settled: {unsettled}"
        deadline = asyncio.get_running_loop().time() + 60
        while True:  # a drop's release or a promotion may follow the saga's status
            history = History.of(await read_all(self.settings, EVENTS), skip=set())
            violations = [
                *checks.course_seats(history),
                *checks.enrollment_seats(history),
                *checks.student_credits(history),
            ]
            if not violations or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.5)
        assert not violations, "\n".join(f"{v.kind} {v.subject}: {v.detail}" for v in violations)
        return {k.split(":", 1)[1]: seen[k].status for k in keys}

    async def wait_stock(self, product: str, predicate: Any, timeout: float = 30) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            fact = self.stock(product)
            if fact is not None and predicate(fact):
                return fact
            await asyncio.sleep(0.05)
        raise AssertionError(f"stock of {product} never matched; last: {self.stock(product)}")


@asynccontextmanager
async def running_stack(
    settings: Settings, log_dir: Path, *, projected: bool = False
) -> AsyncIterator[Stack]:
    """Topics, a worker process, the API in this process and an event tail. ``projected``:
    also a projector in this process into ``settings.database_url`` (a migrated database)
    and the API's own lifespan, so its GET routes answer."""
    if not broker_reachable():
        raise RuntimeError(
            f"no Kafka broker at {BOOTSTRAP}: start one with `deploy/local/kafka.sh start` "
            "(make test does this)"
        )
    await create_topics(settings)
    worker = Worker(settings, log_dir)
    await asyncio.to_thread(worker.start)
    bus = CommandBus(settings)
    await bus.start()
    tail = EventTail(settings, from_beginning=True)
    await tail.start()
    api = create_api(settings, bus)
    transport = httpx.ASGITransport(app=api)
    stop = asyncio.Event()
    engine = create_read_engine(settings.database_url) if projected else None
    projector = asyncio.create_task(Projector(settings, engine).run(stop)) if engine else None
    try:
        async with AsyncExitStack() as stack:
            if projected:
                await stack.enter_async_context(api.router.lifespan_context(api))
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    transport=transport, base_url="http://api", headers=auth_headers(settings)
                )
            )
            yield Stack(settings, worker, http, tail)
    finally:
        stop.set()
        if projector is not None:
            await projector
        if engine is not None:
            engine.dispose()
        await tail.stop()
        await bus.stop()
        await asyncio.to_thread(worker.stop)


async def read_all(settings: Settings, channel: str, timeout: float = 5.0) -> list[Raw]:
    """Every record currently on a channel's topic (from the beginning)."""
    return await read_topic(settings.kafka_bootstrap, settings.topic(channel), timeout)


async def produce_raw(settings: Settings, channel: str, key: bytes, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    from runtime.kafka_security import aiokafka_options

    producer = AIOKafkaProducer(**aiokafka_options(settings))
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic(channel), value, key=key)
    finally:
        await producer.stop()
