"""The rebuild's transforms wired together, with no I/O: records -> verdicts -> gated
events -> one DataFrame per staged table. The job materializes the two intermediate
results (Parquet) between these steps; the tests call them directly on small inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlalchemy import Table

from readside import schema
from sagas.catalog import READ_MODELS
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


def frames(stage: Staged, receipts_since: datetime) -> dict[Table, DataFrame]:
    """Every staged table and the transform that fills it: one per declared read model
    (:data:`sagas.catalog.READ_MODELS`), then the kernel's and the rebuild's own."""
    gated = stage.gated
    saga_rows = analytics.sagas(gated).cache()  # one row per saga, read twice
    return {
        **{schema.table_of(m): twins.rows(gated, m) for m in READ_MODELS},
        schema.saga_timeline: models.saga_timeline(gated),
        schema.entity_positions: models.entity_positions(gated),
        schema.pending_events: models.pending_events(gated),
        schema.command_receipts: models.command_receipts(gated, receipts_since),
        tables.rebuild_rejects: stage.rejects,
        tables.saga_daily_stats: analytics.daily_stats(saga_rows),
        tables.saga_daily_reasons: analytics.daily_reasons(saga_rows),
    }


def count(stage: Staged) -> tuple[dict[str, int], dict[str, int]]:
    """Records per verdict (for the summary) and the projector's counters."""
    rows = models.tally(stage.gated).collect()
    tally: Mapping[tuple[str, bool], int] = {
        (r["gate"], bool(r["known"])): int(r["count"]) for r in rows
    }
    # rebuild_rejects also lists every event of an unknown type (the projector dead-letters
    # those too, and applies them as skipped): one row each, not counted as rejected.
    unknown_letters = sum(n for (_, known), n in tally.items() if not known)
    rejected = int(stage.rejects.count()) - unknown_letters
    per_verdict: dict[str, int] = {"rejected": rejected}
    for (verdict, _), n in tally.items():
        per_verdict[verdict] = per_verdict.get(verdict, 0) + n
    counters = models.counters(tally, rejected)
    per_verdict["unknown_type"] = counters.get("unknown_type", 0)
    return per_verdict, counters
