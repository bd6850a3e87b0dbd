"""What every read model shares: the row base, the saga timeline, entity ids, summaries.

Each model has a module of its own with its row and its declaration
(:mod:`sagas.projections.orders`, :mod:`sagas.projections.stock`), whose fold
``(row | None, event) -> row | None`` is derived from its columns
(:mod:`sagas.projections.fold`); a fold only ever sees an entity's events in sequence
order (see :mod:`sagas.projections.ordering`).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from sagas.messages import Envelope, Message


class Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class TimelineRow(Row):
    """One step of a saga: any event that names the saga, from any entity."""

    saga_id: str
    entity_key: str
    sequence: int
    event_type: str
    occurred_at: datetime
    summary: str


def entity_id(event: Envelope) -> str:
    return event.key.split(":", 1)[1]


def timeline_entry(event: Envelope) -> TimelineRow | None:
    if event.saga_id is None:
        return None
    return TimelineRow(
        saga_id=event.saga_id,
        entity_key=event.key,
        sequence=event.sequence or 0,
        event_type=event.type,
        occurred_at=event.occurred_at,
        summary=summarize(event.message()),
    )


def summarize(message: Message) -> str:
    """A line a person reads in a saga's timeline: the contract's ``SUMMARY``, or its type."""
    return message.TYPE if message.SUMMARY is None else message.SUMMARY.render(message)
