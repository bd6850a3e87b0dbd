"""Fold one entity's ready events (in sequence order) into its row and timeline entries.

The fold an entity gets is the one its read model declares (:func:`sagas.catalog.model_for`
its entity type); a type without a model (payments...) has no row of its own but still
feeds saga timelines. An event of a type this code does not know (written by a newer
producer) is skipped: it keeps its sequence number, so the entity's later events are not
held behind it forever, and it is reported so the projector can be upgraded and the read
models rebuilt from the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sagas.catalog import model_for
from sagas.messages import Envelope, Message
from sagas.projections.rows import Row, TimelineRow, timeline_entry


@dataclass(frozen=True)
class Folded:
    row: Row | None
    timeline: tuple[TimelineRow, ...]
    unknown: tuple[Envelope, ...]
    """Events whose type is not registered: skipped, yet their sequence counts as applied."""


def is_known(event: Envelope) -> bool:
    return event.type in Message.known_types()


def fold_entity(entity_type: str, row: Row | None, ready: Iterable[Envelope]) -> Folded:
    model = model_for(entity_type)
    timeline: list[TimelineRow] = []
    unknown: list[Envelope] = []
    for event in ready:
        if not is_known(event):
            unknown.append(event)
            continue
        if model is not None:
            row = model.fold(row, event)
        if (entry := timeline_entry(event)) is not None:
            timeline.append(entry)
    return Folded(row, tuple(timeline), tuple(unknown))
