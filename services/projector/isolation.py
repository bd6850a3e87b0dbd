"""Find the events a working database refuses, so one bad event cannot stall the projection.

When a batch's transaction fails again and again while the database answers ``SELECT 1``,
the cause is in the batch (a value the database refuses, a fold that raises on it), and
retrying the same batch forever would stop every read model behind it. :func:`refused`
bisects the batch with trial transactions that are always rolled back, down to the single
events that fail on their own; :func:`without` replaces each of them by a placeholder the
folds skip.

Why a placeholder and not a hole: the refused event is dead-lettered with the database's
error, and its sequence number counts as consumed, exactly as for an event of an unknown
type. Leaving a hole instead would hold every later event of its entity behind a gap that
can never fill (only a re-send of the same event could fill it, and that would be refused
again); skipping it keeps the entity current, and the letter plus the ``dead_lettered``
counter say what the row is missing until the event is fixed and the models are rebuilt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sqlalchemy import Engine, text

from readside.batch import REFUSED_TYPE, Batch, apply_batch
from readside.store import Fenced
from readside.triage import Positioned
from sagas.messages import Envelope
from sagas.untrusted import bounded

log = logging.getLogger(__name__)


class DatabaseDown(RuntimeError):
    """The database does not answer ``SELECT 1``: wait for it, blame no event."""


@dataclass(frozen=True)
class Refused:
    where: Positioned
    reason: str


def database_answers(engine: Engine) -> bool:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        log.warning("the read-model database does not answer: %s", bounded(str(exc)))
        return False
    return True


def trial(engine: Engine, batch: Batch) -> None:
    """Apply ``batch`` and roll back, only to learn whether the database takes it; raises
    what applying it raised."""
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            apply_batch(conn, batch, datetime.now(UTC))
        finally:
            transaction.rollback()


def refused(engine: Engine, batch: Batch) -> list[Refused]:
    """The events of ``batch`` that fail on their own, with the error of each (in log
    order). Raises :class:`DatabaseDown` when the database stops answering meanwhile, and
    ``Fenced`` when another projector process moved one of its partitions on."""
    found: list[Refused] = []
    pending: list[Sequence[Positioned]] = [batch.events]
    while pending:  # a loop over halves, not recursion
        events = pending.pop()
        error = _error(engine, replace(batch, events=events))
        if error is None:
            continue
        if not database_answers(engine):
            raise DatabaseDown(error)
        if len(events) == 1:
            found.append(Refused(events[0], f"the read-model database refused it: {error}"))
            continue
        half = len(events) // 2
        pending += [events[half:], events[:half]]
    found.sort(key=lambda r: (r.where.partition, r.where.offset))
    return found


def without(batch: Batch, refused: Sequence[Refused]) -> Batch:
    """``batch`` with each refused event replaced by a placeholder of the same entity and
    sequence, carrying nothing else (no payload, no saga, no command to give a receipt)."""
    at = {(r.where.partition, r.where.offset) for r in refused}
    events = [
        Positioned(placeholder(p.event), p.partition, p.offset)
        if (p.partition, p.offset) in at
        else p
        for p in batch.events
    ]
    return replace(batch, events=events)


def placeholder(event: Envelope) -> Envelope:
    return Envelope(
        message_id=event.message_id,
        type=REFUSED_TYPE,
        key=event.key,
        occurred_at=event.occurred_at,
        entity_type=event.entity_type,
        sequence=event.sequence,
        payload={},
    )


def _error(engine: Engine, batch: Batch) -> str | None:
    try:
        trial(engine, batch)
    except Fenced:
        raise  # another process applied the partition meanwhile: no event is to blame
    except Exception as exc:
        return bounded(f"{type(exc).__name__}: {_first_line(exc)}")
    return None


def _first_line(exc: Exception) -> str:
    """SQLAlchemy appends the statement and its parameters: the first line says why."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else ""
