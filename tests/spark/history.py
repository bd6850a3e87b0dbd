"""A mixed event history for the rebuild's tests and benchmark, written as the worker would.

:func:`order_history` plays order sagas over a set of products -- confirmed, rejected (out
of stock), declined, cancelled by the customer, expired reservations and a few still in
flight -- with per-entity sequences, product totals that add up, ``cmd-`` causations and
times spread over several days. :func:`enrollment_history` drives the real enrollment
definitions (saga, courses, students) through the unit tests' in-memory bus, so its events
are exactly the ones the worker publishes. The other functions make the log messy the way
real logs get: copies of events, an entity's events written out of order or late, a gap
that never fills, and malformed records of every kind the projector dead-letters.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.ids import derive_id, external_command_id
from sagas.messages import Envelope, Message

T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
OUTCOMES = (
    ("confirmed", 60),
    ("rejected", 14),
    ("declined", 9),
    ("cancelled", 8),
    ("expired", 6),
    ("in_flight", 3),
)
Raw = tuple[bytes | None, bytes | None]


@dataclass
class Writer:
    """Per-entity sequences and ids, as the worker assigns them."""

    events: list[Envelope] = field(default_factory=list)
    sequences: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def emit(
        self,
        entity: str,
        message: Message,
        at: datetime,
        saga_id: str | None,
        cause: str | None = None,
    ) -> Envelope:
        entity_type = entity.split(":", 1)[0]
        self.sequences[entity] += 1
        seq = self.sequences[entity]
        event = Envelope.wrap(
            message,
            message_id=derive_id(entity, str(seq)),
            key=entity,
            occurred_at=at,
            saga_id=saga_id,
            causation_id=cause or derive_id(entity, f"cause/{seq}"),
            entity_type=entity_type,
            sequence=seq,
        )
        self.events.append(event)
        return event

    def drain(self) -> list[Envelope]:
        """The events emitted since the last drain (the sequences stay)."""
        events, self.events = self.events, []
        return events


@dataclass
class Shop:
    writer: Writer
    rng: random.Random
    stock: dict[str, list[int]]
    """product -> [on_hand, reserved]"""

    def totals(self, product: str) -> dict[str, int]:
        on_hand, reserved = self.stock[product]
        return {"on_hand": on_hand, "reserved": reserved}

    def ledger(self, product: str, fact: Message, at: datetime, saga: str | None) -> None:
        self.writer.emit(f"product:{product}", fact, at, saga)


def order_history(orders: int, products: int = 50, seed: int = 7, days: int = 3) -> list[Envelope]:
    """The events of ``orders`` sagas (about 9 per saga), in the order they happened."""
    return list(order_stream(orders, products, seed, days))


def order_stream(
    orders: int, products: int = 50, seed: int = 7, days: int = 3
) -> Iterator[Envelope]:
    """:func:`order_history`'s events, made one saga at a time: a history larger than
    memory (the 10M-event benchmark) is written as it is made."""
    rng = random.Random(seed)
    shop = Shop(Writer(), rng, {f"p{i}": [0, 0] for i in range(products)})
    for product in shop.stock:
        shop.stock[product][0] = rng.randint(500, 5000)
        cmd = external_command_id(product, "stock")
        fact = lc.CapacitySet(**shop.totals(product))
        shop.writer.emit(f"product:{product}", fact, T0, None, cmd)
    yield from shop.writer.drain()
    span = timedelta(days=days).total_seconds()
    kinds = [k for k, w in OUTCOMES for _ in range(w)]
    for i in range(orders):
        start = T0 + timedelta(seconds=span * i / max(orders, 1))
        _saga(shop, f"o{i:07d}", start, rng.choice(kinds))
        yield from shop.writer.drain()


def _saga(shop: Shop, order: str, at: datetime, kind: str) -> None:
    rng, w = shop.rng, shop.writer
    count = min(len(shop.stock), rng.choice((1, 1, 1, 2, 2, 3)))
    products = rng.sample(sorted(shop.stock), count)
    lines = tuple(
        oc.OrderLine(product_id=p, quantity=rng.randint(1, 4), unit_price=_price(rng))
        for p in products
    )
    total = sum((line.unit_price * line.quantity for line in lines), Decimal(0))
    method = "decline" if kind == "declined" else "card"
    cmd = external_command_id(order, "place")
    placed = oc.OrderPlaced(
        customer_id=f"c{rng.randint(1, 5000)}", lines=lines, payment_method=method, total=total
    )
    key = f"order:{order}"
    w.emit(key, placed, at, order, cmd)
    if int(order[1:]) % 2 == 0:
        # Streams written before OrderPlaced alone said PENDING carry a status event for it
        # as well; both forms must give the same rows.
        w.emit(key, oc.OrderStatusChanged(status="PENDING"), at, order, cmd)
    clock = _Clock(at, rng)
    if kind == "rejected":
        return _rejected(shop, order, lines, clock)
    for line in lines:
        _hold(shop, order, line, clock.tick())
    w.emit(key, oc.OrderStatusChanged(status="AUTHORIZING"), clock.tick(), order)
    if kind == "in_flight":
        return None
    if kind == "expired":
        return _fail(
            shop,
            order,
            lines,
            clock,
            f"reservation for {lines[0].product_id} expired",
            expired=lines[0].product_id,
        )
    payment = f"payment:{order}"
    if kind == "declined":
        fact = pc.Declined(amount=total, method=method, reason="method decline is refused")
        w.emit(payment, fact, clock.tick(), order)
        return _fail(shop, order, lines, clock, "payment declined: method decline is refused")
    w.emit(payment, pc.Authorized(amount=total, method=method), clock.tick(), order)
    if kind == "cancelled":
        w.emit(payment, pc.Voided(amount=total, refunded=False), clock.tick(), order)
        return _fail(shop, order, lines, clock, "cancelled by customer", cause=f"cmd-{order}-x")
    w.emit(key, oc.OrderStatusChanged(status="CONFIRMING"), clock.tick(), order)
    for line in lines:
        _sell(shop, order, line, clock.tick())
    w.emit(key, oc.OrderStatusChanged(status="CAPTURING"), clock.tick(), order)
    w.emit(payment, pc.Captured(amount=total), clock.tick(), order)
    w.emit(key, oc.OrderStatusChanged(status="CONFIRMED"), clock.tick(), order)
    return None


@dataclass
class _Clock:
    now: datetime
    rng: random.Random

    def tick(self) -> datetime:
        self.now += timedelta(milliseconds=self.rng.randint(5, 400))
        return self.now


def _price(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(99, 20000)) / 100


def _rejected(shop: Shop, order: str, lines: tuple[oc.OrderLine, ...], clock: _Clock) -> None:
    short = lines[-1]
    for line in lines[:-1]:
        _hold(shop, order, line, clock.tick())
    fact = lc.ReservationRejected(
        **shop.totals(short.product_id),
        reservation_id=f"{order}:{short.product_id}",
        quantity=short.quantity,
        reason="insufficient stock",
    )
    shop.ledger(short.product_id, fact, clock.tick(), order)
    why = f"out of stock: {short.product_id} (insufficient stock)"
    _fail(shop, order, lines[:-1], clock, why, status="REJECTED")


def _hold(shop: Shop, order: str, line: oc.OrderLine, at: datetime) -> None:
    shop.stock[line.product_id][1] += line.quantity
    fact = lc.Reserved(
        **shop.totals(line.product_id),
        reservation_id=f"{order}:{line.product_id}",
        quantity=line.quantity,
        expires_at=(at + timedelta(minutes=5)).isoformat(),
    )
    shop.ledger(line.product_id, fact, at, order)


def _sell(shop: Shop, order: str, line: oc.OrderLine, at: datetime) -> None:
    totals = shop.stock[line.product_id]
    totals[0] -= line.quantity
    totals[1] -= line.quantity
    fact = lc.Confirmed(
        **shop.totals(line.product_id),
        reservation_id=f"{order}:{line.product_id}",
        quantity=line.quantity,
    )
    shop.ledger(line.product_id, fact, at, order)


def _fail(
    shop: Shop,
    order: str,
    held: tuple[oc.OrderLine, ...],
    clock: _Clock,
    reason: str,
    status: str = "CANCELLED",
    expired: str | None = None,
    cause: str | None = None,
) -> None:
    for line in held:
        shop.stock[line.product_id][1] -= line.quantity
        fact = lc.Released(
            **shop.totals(line.product_id),
            reservation_id=f"{order}:{line.product_id}",
            quantity=line.quantity,
            reason="expired" if line.product_id == expired else "cancelled",
        )
        shop.ledger(line.product_id, fact, clock.tick(), order)
    change = oc.OrderStatusChanged(status=status, reason=reason)  # type: ignore[arg-type]
    shop.writer.emit(f"order:{order}", change, clock.tick(), order, cause)


# --- making the log messy ------------------------------------------------------------------


def messy(
    events: list[Envelope], seed: int = 11, entities: tuple[str, ...] = ("order:",)
) -> list[Envelope]:
    """``events`` with copies (5%), some entities' events (of the types ``entities`` names,
    orders by default) written out of sequence order, and a few written late (after
    everything else), as a backfill would."""
    rng = random.Random(seed)
    out = list(events)
    out += [out[i] for i in rng.sample(range(len(out)), len(out) // 20)]
    by_entity: dict[str, list[int]] = defaultdict(list)
    for index, event in enumerate(out):
        by_entity[event.key].append(index)
    orders = [k for k in by_entity if k.startswith(entities)]
    for key in rng.sample(orders, max(1, len(orders) // 10)):
        slots = by_entity[key]
        moved = [out[i] for i in slots]
        rng.shuffle(moved)
        for slot, event in zip(slots, moved, strict=True):
            out[slot] = event
    late = {i for key in rng.sample(orders, max(1, len(orders) // 20)) for i in by_entity[key][:2]}
    backfill = [out[i] for i in sorted(late)]
    return [e for i, e in enumerate(out) if i not in late] + backfill


def with_gaps(
    events: list[Envelope], entities: int = 3, seed: int = 5, prefix: str = "order:"
) -> list[Envelope]:
    """Drop the second event of a few orders (entities whose key starts with ``prefix``):
    their later events stay held (pending)."""
    rng = random.Random(seed)
    keys = sorted({e.key for e in events if e.key.startswith(prefix)})
    gapped = set(rng.sample(keys, min(entities, len(keys))))
    return [e for e in events if not (e.key in gapped and e.sequence == 2)]


def encoded(events: list[Envelope]) -> Iterator[Raw]:
    for event in events:
        yield event.key.encode(), event.encode()


def malformed(sample: Envelope) -> list[Raw]:
    """One record of every kind the projector dead-letters, plus lax and unknown ones it
    accepts (a payload written differently, a type from a newer producer)."""
    good = json.loads(sample.encode())
    key = sample.key.encode()

    def env(**changes: object) -> bytes:
        data = {**good, **changes}
        return json.dumps({k: v for k, v in data.items() if v is not _DROP}).encode()

    payload = dict(good["payload"])
    return [
        (b"order:x", b"not json at all"),
        (b"order:x", b"[1, 2, 3]"),
        (b"order:x", None),
        (b"order:x", b"\xff\xfe{bad utf-8"),
        (key, env(message_id=_DROP)),
        (key, env(occurred_at="yesterday")),
        (key, env(schema_version=7)),
        (key, env(entity_type=_DROP)),
        (key, env(sequence=_DROP)),
        (key, env(sequence=0)),
        (key, env(key="product:" + sample.key.split(":", 1)[1])),
        (b"order:someone-else", env()),
        (key, env(payload={**payload, "surprise": 1})),
        (key, env(payload={k: v for k, v in payload.items() if k != "status"})),
        (key, env(payload={**payload, "status": "LOST"})),
        (b"order:" + b"o" * 70, env(key="order:" + "o" * 70)),
        (key, env(saga_id="s" * 65)),
        # Accepted, but not the way Sagaline writes them (the exact route):
        (key, env(type="order.AddedLater", sequence=90)),
        (key, json.dumps(good, indent=1).encode().replace(b'"sequence": ', b'"sequence": 9')),
        (key, env(occurred_at="2024-03-01T09:00:00+02:00", sequence=91)),
    ]


class _Drop:
    pass


_DROP = _Drop()


def lax_order(order: str = "o-lax") -> list[Raw]:
    """An order written loosely (numbers for decimals, 2.0 for an int, spaces, another key
    order): valid for pydantic, so the projector applies it; the rebuild takes the exact
    route for it and must end with the same row."""
    key = f"order:{order}"
    base = {
        "message_id": derive_id(key, "1"),
        "key": key,
        "saga_id": order,
        "entity_type": "order",
        "occurred_at": "2024-03-01T09:00:00.000+00:00",
    }
    placed = {
        **base,
        "type": oc.OrderPlaced.TYPE,
        "sequence": 1,
        "payload": {
            "total": 21.5,
            "payment_method": "card",
            "customer_id": "c-lax",
            "lines": [{"product_id": "p-lax", "quantity": 2.0, "unit_price": 10.75}],
        },
    }
    changed = {
        **base,
        "message_id": derive_id(key, "2"),
        "type": oc.OrderStatusChanged.TYPE,
        "sequence": 2,
        "occurred_at": "2024-03-01T11:00:01+02:00",
        "payload": {"status": "REJECTED", "reason": "out of stock: p-lax (ü)"},
    }
    return [
        (key.encode(), json.dumps(placed).encode()),
        (key.encode(), json.dumps(changed, indent=2, ensure_ascii=True).encode()),
    ]
