"""Fold one entity's ready events (in sequence order) into its row and timeline entries.

Which fold an entity gets depends on its ``entity_type``: orders -> :func:`apply_order`,
products -> :func:`apply_stock`; any other type (payments...) has no row of its own but still
feeds saga timelines. An event of a type this code does not know (written by a newer
producer) is skipped: it keeps its sequence number, so the entity's later events are not
held behind it forever, and it is reported so the projector can be upgraded and the read
models rebuilt from the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sagas.messages import Envelope, Message
from sagas.projections.rows import (
    ORDER,
    PRODUCT,
    OrderRow,
    StockRow,
    TimelineRow,
    apply_order,
    apply_stock,
    timeline_entry,
)

EntityRow = OrderRow | StockRow


@dataclass(frozen=True)
class Folded:
    row: EntityRow | None
    timeline: tuple[TimelineRow, ...]
    unknown: tuple[Envelope, ...]
    """Events whose type is not registered: skipped, yet their sequence counts as applied."""


def is_known(event: Envelope) -> bool:
    return event.type in Message.known_types()


def fold_entity(entity_type: str, row: EntityRow | None, ready: Iterable[Envelope]) -> Folded:
    timeline: list[TimelineRow] = []
    unknown: list[Envelope] = []
    for event in ready:
        if not is_known(event):
            unknown.append(event)
            continue
        row = _apply(entity_type, row, event)
        if (entry := timeline_entry(event)) is not None:
            timeline.append(entry)
    return Folded(row, tuple(timeline), tuple(unknown))


def _apply(entity_type: str, row: EntityRow | None, event: Envelope) -> EntityRow | None:
    if entity_type == ORDER:
        return apply_order(row if isinstance(row, OrderRow) else None, event)
    if entity_type == PRODUCT:
        return apply_stock(row if isinstance(row, StockRow) else None, event)
    return None
