"""The load: concurrent clients placing multi-line orders over a few scarce products through
the REST API, some with a declined payment, some cancelled right after placement; and
clients enrolling students in a few small courses, dropping and transferring enrollments.

A client retries a 5xx, a timeout or a refused connection with the SAME Idempotency-Key,
with backoff, for a bounded time. An order counts as *accepted* only once its 202 reached
the client; the order id of every attempt is known anyway (the API derives it from the
customer and the Idempotency-Key), so an attempt whose 202 was lost can still be followed
on the event topic.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.api.idempotency import scoped_id

RETRY_BUDGET_S = 150.0
"""How long a client keeps retrying one request: longer than the longest broker outage
plus its restart, so an outage alone never makes a client give up."""
DECLINE_SHARE = 0.10
CANCEL_SHARE = 0.10


@dataclass
class Attempt:
    order_id: str
    customer_id: str
    idempotency_key: str
    lines: dict[str, int]
    method: str
    accepted: bool = False
    """A 202 reached the client."""
    refused: str | None = None
    """A 4xx: the API refused it (a harness mistake, reported)."""
    gave_up: bool = False
    cancel_requested: bool = False
    cancel_accepted: bool = False


@dataclass
class LoadDriver:
    http: httpx.AsyncClient
    products: list[str]
    rng: random.Random
    namespace: str
    """The idempotency namespace of the harness's API key (ids are scoped by caller)."""
    clients: int = 6
    customers: int = 20
    attempts: list[Attempt] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    async def run(self, duration: float) -> None:
        """Place orders for ``duration`` seconds, then let in-flight retries finish."""
        stop = asyncio.Event()
        tasks = [asyncio.create_task(self._client(i, stop)) for i in range(self.clients)]
        await asyncio.sleep(duration)
        stop.set()
        await asyncio.gather(*tasks)

    async def _client(self, index: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._place_one()
            await asyncio.sleep(self.rng.uniform(0.05, 0.3))

    async def _place_one(self) -> None:
        customer = f"cust-{self.rng.randrange(self.customers)}"
        key = uuid.UUID(int=self.rng.getrandbits(128)).hex
        chosen = self.rng.sample(self.products, self.rng.randint(1, min(3, len(self.products))))
        lines = {p: self.rng.randint(1, 3) for p in chosen}
        method = "decline" if self.rng.random() < DECLINE_SHARE else "card"
        attempt = Attempt(scoped_id(self.namespace, "order", key), customer, key, lines, method)
        self.attempts.append(attempt)
        body = {
            "customer_id": customer,
            "lines": [
                {"product_id": p, "quantity": q, "unit_price": "5.00"} for p, q in lines.items()
            ],
            "payment": {"method": method},
        }
        response = await self.post("/orders", body, key)
        if response is None:
            attempt.gave_up = True
            return
        if response.status_code != 202:
            attempt.refused = f"{response.status_code} {response.text[:200]}"
            return
        attempt.accepted = True
        returned = response.json().get("order_id")
        if returned != attempt.order_id:  # the API changed how it derives ids: follow it
            self.stats["order id differs from the derived one"] += 1
            attempt.order_id = str(returned)
        if self.rng.random() < CANCEL_SHARE:
            attempt.cancel_requested = True
            cancel = await self.post(
                f"/orders/{attempt.order_id}/cancel", {"reason": "changed my mind"}, f"c-{key}"
            )
            attempt.cancel_accepted = cancel is not None and cancel.status_code == 202

    async def post(
        self, path: str, body: dict[str, Any], key: str, method: str = "POST"
    ) -> httpx.Response | None:
        return await post_with_retries(self.http, self.rng, self.stats, path, body, key, method)

    @property
    def accepted(self) -> list[Attempt]:
        return [a for a in self.attempts if a.accepted]


async def post_with_retries(
    http: httpx.AsyncClient,
    rng: random.Random,
    stats: Counter[str],
    path: str,
    body: dict[str, Any] | None,
    key: str,
    method: str = "POST",
) -> httpx.Response | None:
    """A command with retries of 5xx and transport errors under one Idempotency-Key."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RETRY_BUDGET_S
    delay = 0.2
    while True:
        try:
            headers = {"Idempotency-Key": key}
            response = await http.request(method, path, json=body, headers=headers)
            if response.status_code < 500:
                stats[f"http {response.status_code}"] += 1
                return response
            stats[f"http {response.status_code} (retried)"] += 1
        except httpx.TransportError as exc:
            stats[f"{type(exc).__name__} (retried)"] += 1
        if loop.time() >= deadline:
            stats["gave up"] += 1
            return None
        await asyncio.sleep(delay * rng.uniform(0.5, 1.5))
        delay = min(delay * 2, 3.0)


# --- enrollments --------------------------------------------------------------------------

DROP_SHARE = 0.15
TRANSFER_SHARE = 0.15
NO_WAITLIST_SHARE = 0.2


@dataclass
class EnrollAttempt:
    enrollment_id: str
    student_id: str
    course_id: str
    idempotency_key: str
    waitlist: bool
    accepted: bool = False
    refused: str | None = None
    gave_up: bool = False
    commands: list[str] = field(default_factory=list)
    """The drops and transfers accepted for it (``drop``, ``transfer->c1``)."""


@dataclass
class EnrollmentLoad:
    """Clients enrolling random students in random small courses (most join the waitlist
    when full), and dropping or transferring enrollments they made before, whatever their
    status (a command the enrollment cannot take is refused by its saga: also exercised)."""

    http: httpx.AsyncClient
    courses: list[str]
    students: list[str]
    rng: random.Random
    namespace: str
    clients: int = 2
    attempts: list[EnrollAttempt] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    async def run(self, duration: float) -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(self._client(stop)) for _ in range(self.clients)]
        await asyncio.sleep(duration)
        stop.set()
        await asyncio.gather(*tasks)

    async def _client(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            roll = self.rng.random()
            accepted = self.accepted
            if accepted and roll < DROP_SHARE:
                await self._drop(self.rng.choice(accepted))
            elif accepted and roll < DROP_SHARE + TRANSFER_SHARE:
                await self._transfer(self.rng.choice(accepted))
            else:
                await self._enroll()
            await asyncio.sleep(self.rng.uniform(0.1, 0.5))

    async def _enroll(self) -> None:
        student = self.rng.choice(self.students)
        course = self.rng.choice(self.courses)
        key = uuid.UUID(int=self.rng.getrandbits(128)).hex
        waitlist = self.rng.random() >= NO_WAITLIST_SHARE
        enrollment_id = scoped_id(self.namespace, "enrollment", key)
        attempt = EnrollAttempt(enrollment_id, student, course, key, waitlist)
        self.attempts.append(attempt)
        body = {"student_id": student, "course_id": course, "waitlist": waitlist}
        response = await self._post("/enrollments", body, key)
        if response is None:
            attempt.gave_up = True
        elif response.status_code != 202:
            attempt.refused = f"{response.status_code} {response.text[:200]}"
        else:
            attempt.accepted = True
            attempt.enrollment_id = str(response.json().get("enrollment_id"))

    async def _drop(self, attempt: EnrollAttempt) -> None:
        key = f"drop-{attempt.idempotency_key}-{len(attempt.commands)}"
        path = f"/enrollments/{attempt.enrollment_id}"
        response = await self._post(path, None, key, "DELETE")
        if response is not None and response.status_code == 202:
            attempt.commands.append("drop")

    async def _transfer(self, attempt: EnrollAttempt) -> None:
        course = self.rng.choice(self.courses)
        key = f"transfer-{attempt.idempotency_key}-{len(attempt.commands)}"
        path = f"/enrollments/{attempt.enrollment_id}/transfer"
        response = await self._post(path, {"course_id": course}, key)
        if response is not None and response.status_code == 202:
            attempt.commands.append(f"transfer->{course}")

    async def _post(
        self, path: str, body: dict[str, Any] | None, key: str, method: str = "POST"
    ) -> httpx.Response | None:
        return await post_with_retries(self.http, self.rng, self.stats, path, body, key, method)

    @property
    def accepted(self) -> list[EnrollAttempt]:
        return [a for a in self.attempts if a.accepted]
