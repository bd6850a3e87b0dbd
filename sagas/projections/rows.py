"""What every read model shares: the row base, the saga timeline, entity ids, summaries.

Each model has a module of its own with its row, its fold
``apply_<model>(row | None, event) -> row | None`` and its declaration
(:mod:`sagas.projections.orders`, :mod:`sagas.projections.stock`); a fold only ever sees an
entity's events in sequence order (see :mod:`sagas.projections.ordering`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

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


R = TypeVar("R", bound=Row)


def latest_fact_fold(
    row_type: type[R],
    fact: type[Message],
    derived: Callable[[Any], dict[str, object]] | None = None,
) -> Callable[[R | None, Envelope], R | None]:
    """The fold of a model whose row is its entity's latest ``fact`` (every such fact
    carries the entity's whole state, as ledger facts carry the totals): the first row
    field is the entity id, the fields the fact has are copied, ``derived(message)`` gives
    the others, then ``updated_at`` and ``last_sequence`` come from the event. Other events
    leave the row as it is."""
    key = next(iter(row_type.model_fields))
    copied = [n for n in row_type.model_fields if n in fact.model_fields]

    def fold(row: R | None, event: Envelope) -> R | None:
        message = event.message()
        if not isinstance(message, fact):
            return row
        values: dict[str, object] = {n: getattr(message, n) for n in copied}
        values |= derived(message) if derived is not None else {}
        return row_type(
            **{key: entity_id(event)},
            **values,
            updated_at=event.occurred_at,
            last_sequence=event.sequence or 0,
        )

    return fold


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
