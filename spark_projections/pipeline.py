"""The rebuild's transforms wired together, with no I/O: records -> verdicts -> gated
events -> one DataFrame per staged table. The job materializes the two intermediate
results (Parquet) between these steps; the tests call them directly on small inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlalchemy import Table

from readside import schema
from sagas.catalog import READ_MODELS, SAGA_TYPES
from sagas.projections.declare import ReadModel
from spark_projections import analytics, gate, models, parse, tables, twins


def first_pass(records: DataFrame) -> DataFrame:
    """Kafka records -> gated events, optimistically: every record the native checks vouch
    for is gated at once; the others wait, raw, outside every sequence (``untriaged``).
    Sagaline's producers write nothing else, so this pass is usually the only one."""
    return (
        records.transform(parse.with_verdict)
        .transform(parse.records_as_events)
        .transform(gate.with_gate)
    )


@dataclass(frozen=True)
class Staged:
    gated: DataFrame
    """Every well-formed event, with its gate verdict."""
    rejects: DataFrame


def second_pass(first: DataFrame, any_untriaged: bool) -> Staged:
    """Triage the records the first pass left untriaged with the projector's own code and
    gate again with the events among them. Without any (``any_untriaged`` false), the first
    pass stands, and no Python worker even starts."""
    vouched = first.where(F.col("fast"))
    source = first if any_untriaged else first.where(F.lit(False))
    exact = parse.exact_verdicts(source).cache()  # read twice: events and rejects
    if not any_untriaged:
        return Staged(vouched, parse.rejects(exact))
    events = vouched.drop("gate").unionByName(parse.exact_events(exact))
    return Staged(events.transform(gate.with_gate), parse.rejects(exact))


def staged(records: DataFrame) -> Staged:
    """Both passes, without materializing anything in between (tests, small inputs)."""
    return second_pass(first_pass(records), any_untriaged=True)


TallyKey = tuple[str, bool, str | None]
"""(gate verdict, known type, entity type: the key's prefix, null for an untriaged record)"""


@dataclass(frozen=True)
class Tally:
    """Records per :data:`TallyKey` and the number of rejects: a handful of numbers, for
    the summary and the projector's counters, and to skip the tables no row can reach."""

    events: Mapping[TallyKey, int]
    rejects: int

    @property
    def any_untriaged(self) -> bool:
        return any(verdict == gate.UNTRIAGED for verdict, _, _ in self.events)

    @property
    def any_applied(self) -> bool:
        return any(verdict == gate.APPLIED for verdict, _, _ in self.events)

    @property
    def any_held(self) -> bool:
        return any(verdict == gate.HELD for verdict, _, _ in self.events)

    @property
    def applied_kinds(self) -> frozenset[str | None]:
        """The entity types of the applied events of a known type."""
        return frozenset(kind for (v, known, kind) in self.events if v == gate.APPLIED and known)

    def count(self) -> tuple[dict[str, int], dict[str, int]]:
        """Records per verdict (for the summary) and the projector's counters."""
        tally: dict[tuple[str, bool], int] = {}
        for (verdict, known, _), n in self.events.items():
            tally[verdict, known] = tally.get((verdict, known), 0) + n
        # rebuild_rejects also lists every event of an unknown type (the projector
        # dead-letters those too, and applies them as skipped): one row each, not counted as
        # rejected.
        unknown_letters = sum(n for (_, known), n in tally.items() if not known)
        rejected = self.rejects - unknown_letters
        per_verdict: dict[str, int] = {"rejected": rejected}
        for (verdict, _), n in tally.items():
            per_verdict[verdict] = per_verdict.get(verdict, 0) + n
        counters = models.counters(tally, rejected)
        per_verdict["unknown_type"] = counters.get("unknown_type", 0)
        return per_verdict, counters


@dataclass(frozen=True)
class Source:
    """What the staged tables are built from."""

    stage: Staged
    receipts_since: datetime
    saga_rows: Callable[[], DataFrame]
    """One row per saga, built on first use and cached: two tables read it."""


@dataclass(frozen=True)
class StagedTable:
    """A staged table, the transform that fills it, and whether a :class:`Tally` lets any
    row reach it: each transform keeps only events of some verdict, entity type or known
    type, so a tally without them proves the table empty."""

    table: Table
    build: Callable[[Source], DataFrame]
    reached: Callable[[Tally], bool]


def _model(model: ReadModel[Any]) -> StagedTable:
    return StagedTable(
        schema.table_of(model),
        lambda s: twins.rows(s.stage.gated, model),
        lambda t: model.entity_type in t.applied_kinds,
    )


_SAGA_KINDS = frozenset(s.entity_type for s in SAGA_TYPES)

STAGED_TABLES: tuple[StagedTable, ...] = (
    *(_model(m) for m in READ_MODELS),
    StagedTable(
        schema.saga_timeline,
        lambda s: models.saga_timeline(s.stage.gated),
        lambda t: bool(t.applied_kinds),
    ),
    StagedTable(
        schema.entity_positions,
        lambda s: models.entity_positions(s.stage.gated),
        lambda t: t.any_applied,
    ),
    StagedTable(
        schema.pending_events, lambda s: models.pending_events(s.stage.gated), lambda t: t.any_held
    ),
    StagedTable(
        schema.command_receipts,
        lambda s: models.command_receipts(s.stage.gated, s.receipts_since),
        lambda t: t.any_applied,
    ),
    StagedTable(tables.rebuild_rejects, lambda s: s.stage.rejects, lambda t: t.rejects > 0),
    StagedTable(
        tables.saga_daily_stats,
        lambda s: analytics.daily_stats(s.saga_rows()),
        lambda t: bool(t.applied_kinds & _SAGA_KINDS),
    ),
    StagedTable(
        tables.saga_daily_reasons,
        lambda s: analytics.daily_reasons(s.saga_rows()),
        lambda t: bool(t.applied_kinds & _SAGA_KINDS),
    ),
)
"""Every staged table: one per declared read model (:data:`sagas.catalog.READ_MODELS`),
then the kernel's and the rebuild's own."""


def frames(
    stage: Staged, receipts_since: datetime, tally: Tally | None = None
) -> dict[Table, DataFrame]:
    """Every staged table's DataFrame; with a ``tally``, only those it lets a row reach
    (:func:`unreached`): the others' Spark jobs (planning, code generation, a scan of every
    event) would only confirm they are empty."""
    saga_rows = cache(lambda: analytics.sagas(stage.gated).cache())
    source = Source(stage, receipts_since, saga_rows)
    return {t.table: t.build(source) for t in STAGED_TABLES if tally is None or t.reached(tally)}


def unreached(tally: Tally) -> frozenset[Table]:
    """The staged tables no row can reach, by the tally."""
    return frozenset(t.table for t in STAGED_TABLES if not t.reached(tally))


def tally_of(events: DataFrame, rejects: int = 0) -> Tally:
    """``events`` (gated events, or the first pass's records) tallied in one small job."""
    kind = F.substring_index(F.col("entity_key"), ":", 1).alias("entity_type")
    rows = events.groupBy("gate", "known", kind).count().collect()
    counted = {(r["gate"], bool(r["known"]), r["entity_type"]): int(r["count"]) for r in rows}
    return Tally(counted, rejects)


def tally(stage: Staged) -> Tally:
    return tally_of(stage.gated, int(stage.rejects.count()))
