"""Golden domain events and the rows they must give, shared by the fold, projector and
crash tests (and, later, the Spark rebuild).

:func:`golden_events` writes plausible order sagas the way the worker would: per-entity
sequences 1, 2, 3..., product totals that add up, a ``cmd-`` causation on the events a client
command caused. :func:`expected_rows` folds them with the pure projection functions, in
sequence order, which is the meaning every other path must reproduce.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.ids import derive_id, external_command_id
from sagas.messages import Envelope, Message
from sagas.projections.entity import fold_entity
from sagas.projections.orders import OrderRow
from sagas.projections.rows import TimelineRow
from sagas.projections.stock import StockRow

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


@dataclass
class _Writer:
    """Assigns per-entity sequences and increasing times, as the worker does."""

    events: list[Envelope] = field(default_factory=list)
    sequences: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    clock: int = 0

    def emit(
        self,
        entity_type: str,
        entity_id: str,
        message: Message,
        saga_id: str | None,
        causation_id: str | None = None,
    ) -> Envelope:
        key = f"{entity_type}:{entity_id}"
        self.sequences[key] += 1
        self.clock += 1
        event = Envelope.wrap(
            message,
            message_id=derive_id(key, str(self.sequences[key])),
            key=key,
            occurred_at=T0 + timedelta(milliseconds=250 * self.clock),
            saga_id=saga_id,
            causation_id=causation_id or derive_id(key, f"cause/{self.sequences[key]}"),
            entity_type=entity_type,
            sequence=self.sequences[key],
        )
        self.events.append(event)
        return event


def golden_events(orders: int = 40, products: int = 5, customers: int = 7) -> list[Envelope]:
    """Events of ``orders`` sagas over a few products: confirmed, rejected, declined."""
    w = _Writer()
    stock = {f"p{i}": [20, 0] for i in range(products)}  # on_hand, reserved
    for product, (on_hand, _) in stock.items():
        cmd = external_command_id(product, "set")
        w.emit("product", product, lc.CapacitySet(on_hand=on_hand, reserved=0), None, cmd)
    for i in range(orders):
        _saga(w, i, f"p{i % products}", stock, customer=f"c{i % customers}")
    return w.events


def _saga(w: _Writer, i: int, product: str, stock: dict[str, list[int]], customer: str) -> None:
    order = f"o{i:03d}"
    quantity = 1 + i % 3
    line = oc.OrderLine(product_id=product, quantity=quantity, unit_price=Decimal("9.95"))
    placed = oc.OrderPlaced(
        customer_id=customer,
        lines=(line,),
        payment_method="card",
        total=line.unit_price * quantity,
    )
    cmd = external_command_id(order, "place")
    w.emit("order", order, placed, order, cmd)
    if i % 2 == 0:
        # Streams written before OrderPlaced alone said PENDING carry a status event for it.
        w.emit("order", order, oc.OrderStatusChanged(status="PENDING"), order, cmd)
    on_hand, reserved = stock[product]
    rid = f"{order}:{product}"
    if i % 5 == 4 or on_hand - reserved < quantity:
        rejected = lc.ReservationRejected(
            on_hand=on_hand, reserved=reserved, reservation_id=rid, quantity=quantity, reason="x"
        )
        w.emit("product", product, rejected, order)
        why = f"out of stock: {product} (x)"
        w.emit("order", order, oc.OrderStatusChanged(status="REJECTED", reason=why), order)
        return
    reserved += quantity
    hold = lc.Reserved(
        on_hand=on_hand, reserved=reserved, reservation_id=rid, quantity=quantity, expires_at="t"
    )
    w.emit("product", product, hold, order)
    w.emit("order", order, oc.OrderStatusChanged(status="AUTHORIZING"), order)
    amount = placed.total
    if i % 5 == 3:
        w.emit("payment", order, pc.Declined(amount=amount, method="card", reason="no"), order)
        reserved -= quantity
        release = lc.Released(
            on_hand=on_hand,
            reserved=reserved,
            reservation_id=rid,
            quantity=quantity,
            reason="cancelled",
        )
        w.emit("product", product, release, order)
        why = "payment declined: no"
        w.emit("order", order, oc.OrderStatusChanged(status="CANCELLED", reason=why), order)
    else:
        w.emit("payment", order, pc.Authorized(amount=amount, method="card"), order)
        w.emit("order", order, oc.OrderStatusChanged(status="CONFIRMING"), order)
        on_hand, reserved = on_hand - quantity, reserved - quantity
        sold = lc.Confirmed(
            on_hand=on_hand, reserved=reserved, reservation_id=rid, quantity=quantity
        )
        w.emit("product", product, sold, order)
        w.emit("order", order, oc.OrderStatusChanged(status="CAPTURING"), order)
        w.emit("payment", order, pc.Captured(amount=amount), order)
        w.emit("order", order, oc.OrderStatusChanged(status="CONFIRMED"), order)
    stock[product] = [on_hand, reserved]


def scrambled(events: Iterable[Envelope], seed: int = 1, duplicates: float = 0.1) -> list[Envelope]:
    """``events`` in a random order (so out of order per entity) with some sent twice."""
    rng = random.Random(seed)
    out = list(events)
    out += rng.sample(out, int(len(out) * duplicates))
    rng.shuffle(out)
    return out


@dataclass(frozen=True)
class Expected:
    orders: dict[str, OrderRow]
    stock: dict[str, StockRow]
    timeline: set[TimelineRow]
    positions: dict[str, int]


def expected_rows(events: Iterable[Envelope]) -> Expected:
    """The pure folds over each entity's events, deduplicated and in sequence order."""
    by_entity: dict[str, dict[int, Envelope]] = defaultdict(dict)
    for event in events:
        by_entity[event.key].setdefault(event.sequence or 0, event)
    result = Expected({}, {}, set(), {})
    for key, numbered in by_entity.items():
        entity_type, entity_id = key.split(":", 1)
        ready = [numbered[s] for s in sorted(numbered)]
        folded = fold_entity(entity_type, None, ready)
        if isinstance(folded.row, OrderRow):
            result.orders[entity_id] = folded.row
        if isinstance(folded.row, StockRow):
            result.stock[entity_id] = folded.row
        result.timeline.update(folded.timeline)
        result.positions[key] = max(numbered)
    return result
