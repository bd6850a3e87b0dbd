"""What the console's pages show, gathered from what exists: the read models (through
``readside.queries`` and the declarations in ``sagas.catalog``), the projector's checkpoints
beside the broker's end offsets, the rebuild's run log, and ``services.deadletters``.

Nothing here names a saga type: every list and lookup iterates over ``SAGA_TYPES``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Connection

from readside import queries
from sagas.catalog import SAGA_TYPES
from sagas.messages import Message
from sagas.projections.declare import SagaType
from services.deadletters import Letter

SEARCH_LIMIT = 50
FAILURES_LIMIT = 100
REASONS_OF = 5000
"""The reason filter offers the reasons of the most recent failures of each status, this
many: counting every failure's reason took 150 ms at a million sagas."""


@dataclass(frozen=True)
class SagaSummary:
    """One saga in a list: its type, id, status, reason and when its row last changed."""

    saga_type: str
    saga_id: str
    status: str
    reason: str | None
    updated_at: datetime
    matched: str = ""
    """Which column the search matched (``order_id``, ``customer_id``...)."""


def _summary(saga: SagaType, row: BaseModel, matched: str = "") -> SagaSummary:
    return SagaSummary(
        saga_type=saga.entity_type,
        saga_id=str(getattr(row, saga.model.key)),
        status=str(getattr(row, saga.status_column)),
        reason=getattr(row, saga.reason_column),
        updated_at=getattr(row, saga.updated_column),
        matched=matched,
    )


def search(conn: Connection, text: str) -> tuple[SagaSummary | None, list[SagaSummary]]:
    """(the saga whose id is ``text``, if one is; the sagas whose other indexed id columns
    hold ``text``: an order's customer, an enrollment's student or course), newest first.
    The columns searched are those each model declares an index on."""
    for saga in SAGA_TYPES:
        row = queries.get_row(conn, saga.model, text)
        if row is not None:
            return _summary(saga, row, saga.model.key), []
    found: list[SagaSummary] = []
    for saga in SAGA_TYPES:
        for name in _id_columns(saga):
            rows = queries.rows_where(
                conn, saga.model, name, text, saga.updated_column, SEARCH_LIMIT
            )
            found += [_summary(saga, r, name) for r in rows]
    found.sort(key=lambda s: s.updated_at, reverse=True)
    return None, found[:SEARCH_LIMIT]


@dataclass(frozen=True)
class Step:
    at: datetime
    since_previous: timedelta | None
    entity_key: str
    event_type: str
    summary: str
    compensation: bool
    """The event undoes an earlier step (its contract says ``COMPENSATION``)."""


@dataclass(frozen=True)
class SagaPage:
    saga_id: str
    saga: SagaType | None
    """None while the saga's own first event is not projected."""
    status: str | None
    reason: str | None
    final: bool
    failed: bool
    steps: list[Step]
    row: list[tuple[str, str]]
    """The saga's read-model row, column by column, as text."""


def saga_page(conn: Connection, saga_id: str) -> SagaPage | None:
    """The saga's timeline and row; None when neither exists."""
    timeline = queries.saga_timeline(conn, saga_id)
    own = {s.entity_key for s in timeline}
    saga = next((t for t in SAGA_TYPES if t.key(saga_id) in own), None)
    row = None
    if saga is None:  # a saga whose steps are not projected yet may have a row already
        for candidate in SAGA_TYPES:
            if (row := queries.get_row(conn, candidate.model, saga_id)) is not None:
                saga = candidate
                break
    elif saga is not None:
        row = queries.get_row(conn, saga.model, saga_id)
    if not timeline and row is None:
        return None
    steps: list[Step] = []
    previous: datetime | None = None
    for s in timeline:
        steps.append(
            Step(
                at=s.occurred_at,
                since_previous=None if previous is None else s.occurred_at - previous,
                entity_key=s.entity_key,
                event_type=s.event_type,
                summary=s.summary,
                compensation=_compensates(s.event_type),
            )
        )
        previous = s.occurred_at
    status = None if row is None or saga is None else getattr(row, saga.status_column)
    return SagaPage(
        saga_id=saga_id,
        saga=saga,
        status=status,
        reason=None if row is None or saga is None else getattr(row, saga.reason_column),
        final=saga is not None and saga.is_final(status),
        failed=saga is not None and status in saga.statuses.failed,
        steps=steps,
        row=[] if row is None else [(k, _text(v)) for k, v in row.model_dump().items()],
    )


def _compensates(event_type: str) -> bool:
    known = Message.known_types().get(event_type)
    return known is not None and known.COMPENSATION


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        # Money inside (an order's lines) is a Decimal: shown as its text.
        return json.dumps(list(value), default=str)
    return str(value)


@dataclass(frozen=True)
class Failures:
    sagas: list[SagaSummary]
    reasons: dict[str, list[str]]
    """Per saga type, the reasons its failed sagas have (what the filter offers)."""


def failures(conn: Connection, saga_type: str | None, reason: str | None) -> Failures:
    """Recent sagas in a failed status (as each type declares), newest first; only of
    ``saga_type`` and with exactly ``reason`` when given."""
    found: list[SagaSummary] = []
    reasons: dict[str, list[str]] = {}
    for saga in SAGA_TYPES:
        failed = saga.statuses.failed
        reasons[saga.entity_type] = queries.recent_reasons(conn, saga, failed, REASONS_OF)
        if saga_type is not None and saga.entity_type != saga_type:
            continue
        rows = queries.rows_in_statuses(conn, saga, failed, reason, FAILURES_LIMIT)
        found += [_summary(saga, r) for r in rows]
    found.sort(key=lambda s: s.updated_at, reverse=True)
    return Failures(found[:FAILURES_LIMIT], reasons)


@dataclass(frozen=True)
class LetterView:
    """A dead letter as the console lists it."""

    letter_offset: int
    source: str
    source_topic: str
    partition: str
    offset: str
    stage: str
    reason: str
    dead_lettered_at: str
    record: str
    """The start of the record's value (or what says why it is not shown)."""
    redriven: dict[str, Any] | None
    """The last re-drive of its source position, None while it is parked."""
    redrivable: bool
    """It names a record to re-send, on a topic a re-drive may send to."""
    foreign: bool
    """It names a record, but on a topic that is no process channel (not re-driven)."""


def names_record(letter: Letter) -> bool:
    """The letter says where its record is and what its digest is (a letter of another
    shape cannot be re-driven)."""
    return all(k in letter.body for k in ("source_topic", "partition", "offset", "value_sha256"))


def letter_views(
    letters: list[Letter], done: dict[str, dict[str, Any]], allowed: frozenset[str]
) -> list[LetterView]:
    """The letters as listed, in the order given; a letter may be re-driven when it names
    its record on one of the ``allowed`` topics."""
    views = []
    for letter in letters:
        body = letter.body
        named = names_record(letter)
        source = letter.source if named else "?"
        views.append(
            LetterView(
                letter_offset=letter.letter_offset,
                source=source,
                source_topic=str(body.get("source_topic", "?")),
                partition=str(body.get("partition", "?")),
                offset=str(body.get("offset", "?")),
                stage=str(body.get("stage", "?")),
                reason=str(body.get("reason", "")),
                dead_lettered_at=str(body.get("dead_lettered_at", "?")),
                record=_record(body),
                redriven=done.get(source) if named else None,
                redrivable=named and body["source_topic"] in allowed,
                foreign=named and body["source_topic"] not in allowed,
            )
        )
    return views


def _record(body: dict[str, Any]) -> str:
    value = body.get("value")
    if isinstance(value, str):
        return value
    if body.get("value_inline") is False:
        return f"({body.get('value_size', '?')} bytes, not carried in the letter)"
    return "(no value)"


def _id_columns(saga: SagaType) -> list[str]:
    """The ids an index of ``saga``'s model leads with (``customer_id``...): not its times
    or statuses, which the saga list's indexes lead with."""
    leading = dict.fromkeys(i.columns[0] for i in saga.model.indexes)
    return [c for c in leading if c.endswith("_id") and c != saga.model.key]


def searched_columns() -> list[str]:
    """The columns a search looks in besides the saga ids (each model's indexed ids)."""
    return list(dict.fromkeys(c for s in SAGA_TYPES for c in _id_columns(s)))


def saga_types() -> list[str]:
    return [s.entity_type for s in SAGA_TYPES]
