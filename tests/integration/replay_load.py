"""A recorded history for the replay: orders and enrollments sent straight to the process
topics, with every outcome the definitions know (confirmed, declined by method or by amount,
rejected out of stock, cancelled by the customer, timed out on a gateway that never answers,
waitlisted, dropped, transferred), then waited for until every saga has settled."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from sagas.catalog import COURSE, ENROLLMENT_SAGA, INVENTORY, ORDER_SAGA, STUDENT
from sagas.contracts import enrollment as en
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.messages import Envelope, Message
from services.bus import CommandBus
from services.event_tail import EventTail

SILENT = "hang"
"""The payment method the gateway never answers (``payment_silent_methods``): a timeout."""
PRICES = (Decimal("1.00"), Decimal("4.50"), Decimal("20.00"), Decimal("75.00"), Decimal("240.00"))
PRODUCTS, SCARCE = 20, ("p0", "p1")
SEATS = 3
ENROLLMENTS_PER_COURSE = 25
"""Courses of 3 seats: waitlists of about 20 (a course's facts carry its waitlist)."""


@dataclass
class Load:
    orders: dict[str, Decimal] = field(default_factory=dict)
    """Order id -> its amount."""
    enrollments: list[str] = field(default_factory=list)

    @property
    def sagas(self) -> int:
        return len(self.orders) + len(self.enrollments)


def _envelope(message: Message, key: str, saga: bool = False) -> Envelope:
    mid = uuid.uuid4().hex
    return Envelope.wrap(
        message, message_id=mid, key=key, saga_id=key if saga else None,
        occurred_at=datetime.now(UTC),
    )  # fmt: skip


async def set_up(bus: CommandBus, students: int, courses: int) -> None:
    stock = [
        (INVENTORY, _envelope(lc.SetCapacity(on_hand=8 if p in SCARCE else 10**6), p))
        for p in (f"p{i}" for i in range(PRODUCTS))
    ]
    catalog = [
        (COURSE, _envelope(en.SetCourse(title=f"c{i}", capacity=SEATS, credits=1 + i % 3), f"c{i}"))
        for i in range(courses)
    ]
    people = [
        (STUDENT, _envelope(en.SetStudent(name=f"s{i}", max_credits=6), f"s{i}"))
        for i in range(students)
    ]
    await bus.send_many([*stock, *catalog, *people])


def _order(rng: random.Random) -> tuple[str, Decimal, list[tuple[str, Envelope]]]:
    order_id = uuid.uuid4().hex[:16]
    lines = tuple(
        oc.OrderLine(
            product_id=f"p{rng.randrange(PRODUCTS)}",
            quantity=rng.randint(1, 3),
            unit_price=rng.choice(PRICES),
        )
        for _ in range(rng.randint(1, 3))
    )
    lines = tuple({line.product_id: line for line in lines}.values())
    roll = rng.random()
    method = "decline" if roll < 0.06 else SILENT if roll < 0.09 else "card"
    place = oc.PlaceOrder(customer_id=f"c{rng.randrange(50)}", lines=lines,
                          payment=oc.PaymentDetails(method=method))  # fmt: skip
    sent = [(ORDER_SAGA, _envelope(place, order_id, saga=True))]
    if rng.random() < 0.08:
        sent.append((ORDER_SAGA, _envelope(oc.CancelOrder(reason="changed mind"), order_id, True)))
    amount = sum((line.unit_price * line.quantity for line in lines), Decimal(0))
    return order_id, amount, sent


def _enrollment(
    rng: random.Random, students: int, courses: int
) -> tuple[str, list[tuple[str, Envelope]]]:
    key = uuid.uuid4().hex[:16]
    enroll = en.Enroll(
        student_id=f"s{rng.randrange(students)}",
        course_id=f"c{rng.randrange(courses)}",
        waitlist=rng.random() < 0.7,
    )
    return key, [(ENROLLMENT_SAGA, _envelope(enroll, key, saga=True))]


def _follow_up(rng: random.Random, key: str, courses: int) -> tuple[str, Envelope] | None:
    roll = rng.random()
    if roll < 0.15:
        return ENROLLMENT_SAGA, _envelope(en.Drop(), key, saga=True)
    if roll < 0.30:
        course = en.Transfer(course_id=f"c{rng.randrange(courses)}")
        return ENROLLMENT_SAGA, _envelope(course, key, saga=True)
    return None


async def drive(
    bus: CommandBus,
    tail: EventTail,
    orders: int,
    enrollments: int,
    seed: int = 29,
    pause_s: float = 0.05,
) -> Load:
    """Send the load in chunks, then wait until every saga settled (a timeout's included)."""
    rng = random.Random(seed)
    students = max(10, enrollments // 3)
    courses = max(4, enrollments // ENROLLMENTS_PER_COURSE)
    await set_up(bus, students, courses)
    await asyncio.sleep(1)  # the stock and courses first: a test of their rules is not ours
    load = Load()
    pending = [("o", i) for i in range(orders)] + [("e", i) for i in range(enrollments)]
    rng.shuffle(pending)
    later: list[tuple[str, Envelope]] = []
    for base in range(0, len(pending), 250):
        batch: list[tuple[str, Envelope]] = []
        for kind, _ in pending[base : base + 250]:
            if kind == "o":
                order_id, amount, sent = _order(rng)
                load.orders[order_id] = amount
            else:
                order_id, sent = _enrollment(rng, students, courses)
                load.enrollments.append(order_id)
                if (more := _follow_up(rng, order_id, courses)) is not None:
                    later.append(more)
            batch += sent
        await bus.send_many(batch)
        await asyncio.sleep(pause_s)  # between chunks of 250 sagas
    await bus.send_many(later)
    await _settled(tail, load)
    return load


async def _settled(tail: EventTail, load: Load, timeout: float = 900) -> None:
    keys = [f"order:{o}" for o in load.orders] + [f"enrollment:{e}" for e in load.enrollments]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    quiet_since, seen = loop.time(), len(tail.events)
    while loop.time() < deadline:
        await asyncio.sleep(1)
        if len(tail.events) != seen:
            quiet_since, seen = loop.time(), len(tail.events)
        if all(tail.is_settled(k) for k in keys) and loop.time() - quiet_since > 5:
            return
    unsettled = [k for k in keys if not tail.is_settled(k)]
    raise AssertionError(f"{len(unsettled)} sagas did not settle, e.g. {unsettled[:3]}")
