"""The meaning every native transform must reproduce, computed the slow, obvious way: the
projector's triage, :func:`sagas.projections.ordering.gate` per entity in log order, and
the pure folds ``apply_order`` / ``apply_stock`` / ``timeline_entry`` in sequence order.

Records are ``(partition, offset, key, value)``; an entity's events are read in
(partition, offset) order, like the projector reads them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from readside.triage import Rejected, triage, unknown_type_reason
from sagas.ids import is_external_command_id
from sagas.messages import Envelope
from sagas.projections.entity import is_known
from sagas.projections.ordering import gate

# FIXME entity type constants ['ORDER', 'PRODUCT']
from sagas.projections.orders import OrderRow, apply_order
from sagas.projections.rows import TimelineRow, timeline_entry
from sagas.projections.stock import StockRow, apply_stock

Record = tuple[int, int, bytes | None, bytes | None]


@dataclass
class Reference:
    orders: list[OrderRow] = field(default_factory=list)
    stock: list[StockRow] = field(default_factory=list)
    timeline: list[TimelineRow] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    held: list[tuple[Envelope, int, int]] = field(default_factory=list)
    """Held events with their partition and offset."""
    rejected: list[tuple[int, int, str]] = field(default_factory=list)
    receipts: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    applied: list[Envelope] = field(default_factory=list)
    """Applied events of known types, per entity in sequence order."""


def project(records: list[Record]) -> Reference:
    ref = Reference()
    by_entity: dict[str, list[tuple[Envelope, int, int]]] = defaultdict(list)
    letters = 0
    for partition, offset, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        verdict = triage(key, value)
        if isinstance(verdict, Rejected):
            ref.rejected.append((partition, offset, verdict.reason))
            letters += 1
            continue
        by_entity[verdict.key].append((verdict, partition, offset))
        if (unknown := unknown_type_reason(verdict)) is not None:  # dead-lettered and applied
            ref.rejected.append((partition, offset, unknown))
    totals = {"applied": 0, "duplicates": 0, "unknown_type": 0, "dead_lettered": letters}
    for key, positioned in by_entity.items():
        _entity(ref, key, positioned, totals)
    ref.counters = {name: n for name, n in totals.items() if n}
    return ref


def _entity(
    ref: Reference, key: str, positioned: list[tuple[Envelope, int, int]], totals: dict[str, int]
) -> None:
    where: dict[int, tuple[int, int]] = {}
    for event, partition, offset in positioned:
        where.setdefault(event.sequence or 0, (partition, offset))
    gated = gate(0, [event for event, _, _ in positioned])
    totals["duplicates"] += gated.duplicates
    ref.held += [(e, *where[e.sequence or 0]) for e in gated.held]
    if gated.ready:
        ref.positions[key] = gated.last_sequence
    row: Any = None
    entity_type = key.split(":", 1)[0]
    for event in gated.ready:
        _receipt(ref, event, key, where[event.sequence or 0])
        if not is_known(event):
            totals["unknown_type"] += 1
            continue
        totals["applied"] += 1
        ref.applied.append(event)
        if entity_type == ORDER:
            row = apply_order(row, event)
        elif entity_type == PRODUCT:
            row = apply_stock(row, event)
        if (entry := timeline_entry(event)) is not None:
            ref.timeline.append(entry)
    if isinstance(row, OrderRow):
        ref.orders.append(row)
    elif isinstance(row, StockRow):
        ref.stock.append(row)


def _receipt(ref: Reference, event: Envelope, key: str, where: tuple[int, int]) -> None:
    command = event.causation_id
    if command is not None and is_external_command_id(command) and command not in ref.receipts:
        ref.receipts[command] = (key, *where)
