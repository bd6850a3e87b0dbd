"""The rebuild's transforms wired together, with no I/O: records -> verdicts -> gated
events -> one DataFrame per staged table. The job materializes the two intermediate
results (Parquet) between these steps; the tests call them directly on small inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache, partial

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlalchemy import Table

from readside import schema
from sagas.catalog import READ_MODELS, SAGA_TYPES
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


def frames(
    stage: Staged, receipts_since: datetime, skip: frozenset[str] = frozenset()
) -> dict[Table, DataFrame]:
    """Every staged table and the transform that fills it: one per declared read model
    (:data:`sagas.catalog.READ_MODELS`), then the kernel's and the rebuild's own. Tables
    named in ``skip`` (:meth:`Tally.empty`) are left out: no row could reach them."""
    gated = stage.gated

    @cache
    def saga_rows() -> DataFrame:
        return analytics.sagas(gated).cache()  # one row per saga, read twice

    transforms: dict[Table, Callable[[], DataFrame]] = {
        **{schema.table_of(m): partial(twins.rows, gated, m) for m in READ_MODELS},
        schema.saga_timeline: partial(models.saga_timeline, gated),
        schema.entity_positions: partial(models.entity_positions, gated),
        schema.pending_events: partial(models.pending_events, gated),
        schema.command_receipts: partial(models.command_receipts, gated, receipts_since),
        tables.rebuild_rejects: lambda: stage.rejects,
        tables.saga_daily_stats: lambda: analytics.daily_stats(saga_rows()),
        tables.saga_daily_reasons: lambda: analytics.daily_reasons(saga_rows()),
    }
    return {table: build() for table, build in transforms.items() if table.name not in skip}


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

    def empty(self) -> frozenset[str]:
        """The staged tables no row can reach: each of them is filtered on a verdict, an
        entity type or known types that no gated event has. Their Spark jobs (planning,
        code generation, a scan of every event) would only confirm it."""
        applied = {(known, kind) for (v, known, kind) in self.events if v == gate.APPLIED}
        known_kinds = {kind for known, kind in applied if known}
        sagas = {s.entity_type for s in SAGA_TYPES}
        reached = {
            **{schema.table_of(m).name: m.entity_type in known_kinds for m in READ_MODELS},
            schema.saga_timeline.name: bool(known_kinds),
            schema.entity_positions.name: bool(applied),
            schema.pending_events.name: any(v == gate.HELD for v, _, _ in self.events),
            schema.command_receipts.name: bool(applied),
            tables.rebuild_rejects.name: self.rejects > 0,
            tables.saga_daily_stats.name: bool(known_kinds & sagas),
            tables.saga_daily_reasons.name: bool(known_kinds & sagas),
        }
        return frozenset(name for name, some in reached.items() if not some)


def tally_of(events: DataFrame, rejects: int = 0) -> Tally:
    """``events`` (gated events, or the first pass's records) tallied in one small job."""
    kind = F.substring_index(F.col("entity_key"), ":", 1).alias("entity_type")
    rows = events.groupBy("gate", "known", kind).count().collect()
    counted = {(r["gate"], bool(r["known"]), r["entity_type"]): int(r["count"]) for r in rows}
    return Tally(counted, rejects)


def tally(stage: Staged) -> Tally:
    return tally_of(stage.gated, int(stage.rejects.count()))


def count(stage: Staged) -> tuple[dict[str, int], dict[str, int]]:
    """Records per verdict (for the summary) and the projector's counters."""
    return tally(stage).count()
