"""One transform per read model: gated events -> the rows the online projector holds.

Each re-expresses a fold of :mod:`sagas.projections` over an entity's applied events in
sequence order, as aggregates (the unit tests compare each with the Python fold):

- ``apply_order``: the last ``OrderPlaced`` starts the row; the last status change, if it
  comes after it, sets status, reason and ``updated_at``; ``last_sequence`` is the last
  known event (necessarily at or after that ``OrderPlaced``).
- ``apply_stock``: the last ledger fact carries the totals.
- ``timeline_entry``: one row per applied event that names a saga.

As in :func:`sagas.projections.entity.fold_entity`, an event of an unknown type takes its
sequence (positions) but touches no row and no timeline. Output columns are named and typed
like the SQL tables (:mod:`readside.schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sagas.contracts.orders import OrderPlaced, OrderStatusChanged
from sagas.ids import COMMAND_ID_PREFIX

# FIXME entity type constants ['ORDER', 'PRODUCT']
from spark_projections import contract, gate, limits, parse
from spark_projections.summary import summary


def orders(gated: DataFrame) -> DataFrame:
    events = _known_applied(gated, ORDER)
    is_placed = F.col("type") == OrderPlaced.TYPE
    is_change = F.col("type") == OrderStatusChanged.TYPE
    placed = F.struct("p", "occurred_at")
    change = F.struct("sequence", F.col("p.status"), F.col("p.reason"), "occurred_at")
    rows = events.groupBy("entity_key").agg(
        F.max(F.when(is_placed, F.col("sequence"))).alias("placed_at"),
        F.max_by(F.when(is_placed, placed), F.when(is_placed, F.col("sequence"))).alias("o"),
        F.max_by(F.when(is_change, change), F.when(is_change, F.col("sequence"))).alias("c"),
        F.max("sequence").alias("last_sequence"),
    )
    # An OrderPlaced starts the row afresh: only a status change after the last one counts.
    after = rows.withColumn("c", F.when(F.col("c.sequence") > F.col("placed_at"), F.col("c")))
    return after.where(F.col("placed_at").isNotNull()).select(
        limits.entity_id(F.col("entity_key")).alias("order_id"),
        F.col("o.p.customer_id").alias("customer_id"),
        F.coalesce("c.status", F.lit("PENDING")).alias("status"),
        F.col("c.reason").alias("reason"),
        F.to_json("o.p.lines").alias("lines"),
        F.col("o.p.total").cast("decimal(14,2)").alias("total"),
        F.col("o.p.payment_method").alias("payment_method"),
        F.col("o.occurred_at").alias("created_at"),
        F.coalesce("c.occurred_at", "o.occurred_at").alias("updated_at"),
        F.col("last_sequence").cast("int"),
    )


def product_stock(gated: DataFrame) -> DataFrame:
    facts = _known_applied(gated, PRODUCT).where(
        F.col("type").isin(*sorted(contract.ledger_fact_types()))
    )
    last = facts.groupBy("entity_key").agg(
        F.max_by(F.struct("p", "occurred_at", "sequence"), F.col("sequence")).alias("f")
    )
    on_hand, reserved = F.col("f.p.on_hand").cast("int"), F.col("f.p.reserved").cast("int")
    return last.select(
        limits.entity_id(F.col("entity_key")).alias("product_id"),
        on_hand.alias("on_hand"),
        reserved.alias("reserved"),
        (on_hand - reserved).alias("available"),
        F.col("f.occurred_at").alias("updated_at"),
        F.col("f.sequence").cast("int").alias("last_sequence"),
    )


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


def tally(gated: DataFrame) -> DataFrame:
    """Events per gate verdict and known-ness (a handful of rows, for the summary)."""
    return gated.groupBy("gate", "known").count()


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


def _known_applied(gated: DataFrame, entity_type: str) -> DataFrame:
    # The projector picks the fold by the key's prefix (batch._entity), so do we.
    kind = F.substring_index(F.col("entity_key"), ":", 1)
    return gate.applied(gated).where(F.col("known") & (kind == F.lit(entity_type)))
