"""Apply one batch of domain events to the read models, inside the caller's transaction.

For every entity in the batch: load its last applied sequence and its held events, let
:func:`~sagas.projections.ordering.gate` pick what is ready, fold that with
:func:`~sagas.projections.entity.fold_entity`, then write rows, positions, held events,
command receipts, counters and the batch's Kafka offsets. The caller commits all of it at
once, which is what makes a crash at any point neither lose nor repeat an event. The
projector's offsets move only from where its batch was read, so of two processes that read
one partition from one offset only one commits (services/projector/SCALING.md).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from readside import codec, store
from readside.triage import Positioned
from sagas.catalog import READ_MODELS, model_for
from sagas.ids import is_external_command_id
from sagas.messages import ContractError, Envelope
from sagas.projections.entity import fold_entity
from sagas.projections.ordering import Gated, gate
from sagas.projections.rows import Row, TimelineRow

log = logging.getLogger(__name__)

REFUSED_TYPE = "projector.RefusedByDatabase"
"""The type of the placeholder that takes the place of an event the database refused
(:mod:`services.projector.isolation`): registered by no contract, so the folds skip it
while its sequence counts. It is dead-lettered, not counted as an unknown type."""


@dataclass(frozen=True)
class Batch:
    topic: str
    events: Sequence[Positioned]
    """Well-formed domain events, in the order they were read."""
    next_offsets: Mapping[int, int]
    """Per partition, the offset after the last record read, dead-lettered ones included."""
    dead_lettered: int = 0
    started_from: Mapping[int, int | None] | None = None
    """Per partition of ``next_offsets``, the stored offset the batch was read from (None:
    no row yet). Given, the batch commits only where each still stands (the fence of
    :func:`readside.store.advance_checkpoints`, which raises ``Fenced``); None, the offsets
    are written as they are (the rebuild's catch-up, which holds every table locked)."""


@dataclass
class Applied:
    """What a batch did; the counts also go to ``projection_counters``."""

    applied: int = 0
    duplicates: int = 0
    held: int = 0
    """Events waiting behind a gap after this batch, among the batch's entities."""
    receipts: int = 0
    unknown: Counter[str] = field(default_factory=Counter)
    """Skipped events per unknown type."""


@dataclass
class _Entity:
    key: str
    entity_type: str
    last_sequence: int
    candidates: list[Positioned] = field(default_factory=list)
    held_since: dict[int, datetime] = field(default_factory=dict)
    """Sequence -> when first held, for the events held before this batch."""
    _by_sequence: dict[int, Positioned] = field(default_factory=dict)

    def add(self, candidate: Positioned) -> None:
        self.candidates.append(candidate)
        # Of two copies of one sequence the first is kept, as gate() keeps the first.
        self._by_sequence.setdefault(candidate.event.sequence or 0, candidate)

    def gated(self) -> Gated:
        return gate(self.last_sequence, (p.event for p in self.candidates))

    def where(self, event: Envelope) -> Positioned:
        """The position of ``event`` in the log."""
        return self._by_sequence[event.sequence or 0]


def apply_batch(conn: Connection, batch: Batch, now: datetime) -> Applied:
    entities = _entities(conn, batch)
    gated = {key: entity.gated() for key, entity in entities.items()}
    rows = _load_rows(conn, entities, gated)
    outcome = Applied(duplicates=sum(g.duplicates for g in gated.values()))
    changed: dict[str, list[Row]] = defaultdict(list)
    timeline: list[TimelineRow] = []
    receipts: dict[str, dict[str, Any]] = {}
    for key, entity in entities.items():
        ready = gated[key].ready
        if not ready:
            continue
        folded = fold_entity(entity.entity_type, rows.get(key), ready)
        if folded.row is not None:
            changed[entity.entity_type].append(folded.row)
        timeline.extend(folded.timeline)
        outcome.unknown.update(e.type for e in folded.unknown if e.type != REFUSED_TYPE)
        outcome.applied += len(ready) - len(folded.unknown)
        for event in ready:
            _note_receipt(receipts, entity.where(event), now)
    _write_entities(conn, entities, gated, now, outcome)
    # In catalog order, as the rebuild's swap locks them: two lockers, one order, no deadlock.
    for model in READ_MODELS:
        if new_rows := changed.get(model.entity_type):
            store.save_rows(conn, model, new_rows)
    store.add_timeline(conn, timeline)
    store.add_receipts(conn, list(receipts.values()))
    outcome.receipts = len(receipts)
    _save_checkpoints(conn, batch)
    store.add_to_counters(conn, _increments(outcome, batch))
    return outcome


def _save_checkpoints(conn: Connection, batch: Batch) -> None:
    """In the statement order the rebuild's swap locks in (see ``apply_batch``)."""
    if batch.started_from is None:
        store.save_checkpoints(conn, batch.topic, batch.next_offsets)
        return
    starts = batch.started_from
    moves = {p: (starts[p], end) for p, end in batch.next_offsets.items()}
    store.advance_checkpoints(conn, batch.topic, moves)


def _entities(conn: Connection, batch: Batch) -> dict[str, _Entity]:
    """The batch's entities with their positions and, first among candidates, held events."""
    keys = {p.event.key for p in batch.events}
    positions = store.load_positions(conn, keys)
    entities: dict[str, _Entity] = {}
    for row in store.load_pending(conn, keys):
        entity = _entity(entities, row["entity_key"], positions)
        entity.held_since[row["sequence"]] = codec.utc(row["held_since"] or datetime.min)
        try:
            event = Envelope.decode(row["envelope"])
        except ContractError as exc:  # we wrote it, so only a contract change gets here
            log.error("dropping unreadable held event %s#%s: %s", entity.key, row["sequence"], exc)
            continue
        entity.add(Positioned(event, row["topic_partition"], row["topic_offset"]))
    for positioned in batch.events:
        _entity(entities, positioned.event.key, positions).add(positioned)
    return entities


def _entity(entities: dict[str, _Entity], key: str, positions: Mapping[str, int]) -> _Entity:
    if key not in entities:
        entity_type = key.split(":", 1)[0]
        entities[key] = _Entity(key, entity_type, positions.get(key, 0))
    return entities[key]


def _load_rows(
    conn: Connection, entities: Mapping[str, _Entity], gated: Mapping[str, Gated]
) -> dict[str, Row]:
    """The stored rows of the entities that have something to apply, by entity key."""
    wanted: dict[str, dict[str, str]] = defaultdict(dict)  # entity type -> id -> key
    for key, entity in entities.items():
        if gated[key].ready and model_for(entity.entity_type) is not None:
            wanted[entity.entity_type][key.split(":", 1)[1]] = key
    rows: dict[str, Row] = {}
    for model in READ_MODELS:  # catalog order, as the writes (see apply_batch)
        if keys_by_id := wanted.get(model.entity_type):
            for entity_id, row in store.load_rows(conn, model, keys_by_id).items():
                rows[keys_by_id[entity_id]] = row
    return rows


def _write_entities(
    conn: Connection,
    entities: Mapping[str, _Entity],
    gated: Mapping[str, Gated],
    now: datetime,
    outcome: Applied,
) -> None:
    positions = {
        k: g.last_sequence for k, g in gated.items() if g.last_sequence > entities[k].last_sequence
    }
    store.save_positions(conn, positions)
    # Replace the held events of every entity that had some or has some now.
    touched = [k for k, e in entities.items() if e.held_since or gated[k].held]
    held = []
    for key in touched:
        entity = entities[key]
        for event in gated[key].held:
            where = entity.where(event)
            since = entity.held_since.get(event.sequence or 0, now)
            held.append((event, where.partition, where.offset, since))
    store.replace_pending(conn, touched, held)
    outcome.held = len(held)


def _note_receipt(receipts: dict[str, dict[str, Any]], applied: Positioned, now: datetime) -> None:
    command_id = applied.event.causation_id
    if command_id is None or not is_external_command_id(command_id) or command_id in receipts:
        return
    receipts[command_id] = {
        "command_id": command_id,
        "entity_key": applied.event.key,
        "topic_partition": applied.partition,
        "topic_offset": applied.offset,
        "applied_at": codec.utc(now),
    }


def _increments(outcome: Applied, batch: Batch) -> dict[str, int]:
    return {
        "applied": outcome.applied,
        "duplicates": outcome.duplicates,
        "unknown_type": sum(outcome.unknown.values()),
        "dead_lettered": batch.dead_lettered,
    }
