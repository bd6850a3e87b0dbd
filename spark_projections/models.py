"""The read-side kernel's own tables, natively: gated events -> the rows the online
projector holds in ``saga_timeline`` (one row per applied event of a known type that names
a saga, :func:`sagas.projections.rows.timeline_entry`), ``entity_positions``,
``pending_events`` and ``command_receipts``, and the projector's counters.

The declared read models' rows come from their declarations
(:func:`spark_projections.twins.rows`). As in :func:`sagas.projections.entity.fold_entity`,
an event of an unknown type takes its sequence (positions) but touches no row and no
timeline. Output columns are named and typed like the SQL tables (:mod:`readside.schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sagas.ids import COMMAND_ID_PREFIX
from spark_projections import gate, parse
from spark_projections.summary import summary


def saga_timeline(gated: DataFrame) -> DataFrame:
    steps = gate.applied(gated).where(F.col("known") & F.col("saga_id").isNotNull())
    return steps.select(
        "saga_id",
        "entity_key",
        "sequence",
        F.col("type").alias("event_type"),
        "occurred_at",
        summary(F.col("type"), F.col("p")).alias("summary"),
    )


def entity_positions(gated: DataFrame) -> DataFrame:
    return (
        gate.applied(gated)
        .groupBy("entity_key")
        .agg(F.max("sequence").cast("int").alias("last_sequence"))
    )


def pending_events(gated: DataFrame) -> DataFrame:
    """Held events as the projector stores them; ``held_since`` is when the record reached
    the log (the projector's wall clock cannot be replayed; the swap keeps the live value
    of an event still held)."""
    return gate.held(gated).select(
        "entity_key",
        "sequence",
        F.col("partition").alias("topic_partition"),
        F.col("offset").alias("topic_offset"),
        parse.stored_text().alias("envelope"),
        F.col("timestamp").alias("held_since"),
    )


def command_receipts(gated: DataFrame, since: datetime) -> DataFrame:
    """The first applied event of every API command read after ``since`` (older receipts
    the projector has pruned already, by their age)."""
    caused = gate.applied(gated).where(
        F.col("causation_id").startswith(COMMAND_ID_PREFIX) & (F.col("timestamp") >= F.lit(since))
    )
    first = caused.groupBy(F.col("causation_id").alias("command_id")).agg(
        F.min(F.struct("sequence", "offset", "entity_key", "partition", "timestamp")).alias("e")
    )
    return first.select(
        "command_id",
        F.col("e.entity_key").alias("entity_key"),
        F.col("e.partition").alias("topic_partition"),
        F.col("e.offset").alias("topic_offset"),
        F.col("e.timestamp").alias("applied_at"),
    )


def counters(tally_rows: Mapping[tuple[str, bool], int], rejected: int) -> dict[str, int]:
    """The projector's running totals for the same records; a zero total has no row, as
    the projector never writes a zero increment."""
    totals = {
        "applied": tally_rows.get((gate.APPLIED, True), 0),
        "duplicates": sum(n for (g, _), n in tally_rows.items() if g == gate.DUPLICATE),
        "unknown_type": tally_rows.get((gate.APPLIED, False), 0),
        "dead_lettered": rejected,
    }
    return {name: n for name, n in totals.items() if n}
