"""The meaning every native transform must reproduce, computed the slow, obvious way: the
projector's triage, :func:`sagas.projections.ordering.gate` per entity in log order, and
the core's folds in sequence order: :func:`sagas.projections.entity.fold_entity` (the
catalog's model, the timeline, unknown types) and, for every read model asked for (every
declared one unless told otherwise), its declared ``fold``.

Records are ``(partition, offset, key, value)``; an entity's events are read in
(partition, offset) order, like the projector reads them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from readside.triage import Rejected, triage, unknown_type_reason
from sagas.catalog import READ_MODELS, model_for
from sagas.ids import is_external_command_id
from sagas.messages import Envelope
from sagas.projections.declare import ReadModel
from sagas.projections.entity import fold_entity, is_known
from sagas.projections.ordering import gate
from sagas.projections.rows import TimelineRow

Record = tuple[int, int, bytes | None, bytes | None]


@dataclass
class Reference:
    rows: dict[str, list[BaseModel]] = field(default_factory=lambda: defaultdict(list))
    """Each asked-for read model's rows, by model name."""
    timeline: list[TimelineRow] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    held: list[tuple[Envelope, int, int]] = field(default_factory=list)
    """Held events with their partition and offset."""
    rejected: list[tuple[int, int, str]] = field(default_factory=list)
    receipts: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    applied: list[Envelope] = field(default_factory=list)
    """Applied events of known types, per entity in sequence order."""


def project(records: list[Record], models: Sequence[ReadModel[Any]] = READ_MODELS) -> Reference:
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
        _entity(ref, key, positioned, totals, models)
    ref.counters = {name: n for name, n in totals.items() if n}
    return ref


def _entity(
    ref: Reference,
    key: str,
    positioned: list[tuple[Envelope, int, int]],
    totals: dict[str, int],
    models: Sequence[ReadModel[Any]],
) -> None:
    where: dict[int, tuple[int, int]] = {}
    for event, partition, offset in positioned:
        where.setdefault(event.sequence or 0, (partition, offset))
    gated = gate(0, [event for event, _, _ in positioned])
    totals["duplicates"] += gated.duplicates
    ref.held += [(e, *where[e.sequence or 0]) for e in gated.held]
    if gated.ready:
        ref.positions[key] = gated.last_sequence
    for event in gated.ready:
        _receipt(ref, event, key, where[event.sequence or 0])
    entity_type = key.split(":", 1)[0]
    folded = fold_entity(entity_type, None, gated.ready)
    totals["unknown_type"] += len(folded.unknown)
    totals["applied"] += len(gated.ready) - len(folded.unknown)
    known = [e for e in gated.ready if is_known(e)]
    ref.applied += known
    ref.timeline += folded.timeline
    for model in models:
        if model.entity_type != entity_type:
            continue
        # fold_entity folded the catalog's model already; any other one is folded here.
        row = folded.row if model is model_for(entity_type) else _fold(model, known)
        if row is not None:
            ref.rows[model.name].append(row)


def _fold(model: ReadModel[Any], events: list[Envelope]) -> BaseModel | None:
    row = None
    for event in events:
        row = model.fold(row, event)
    return row


def _receipt(ref: Reference, event: Envelope, key: str, where: tuple[int, int]) -> None:
    command = event.causation_id
    if command is not None and is_external_command_id(command) and command not in ref.receipts:
        ref.receipts[command] = (key, *where)
