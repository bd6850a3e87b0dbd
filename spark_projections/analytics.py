"""Daily saga analytics, which only a job that sees the whole log at once does well.

The saga types are the declared ones (:data:`sagas.catalog.SAGA_TYPES`). A saga is told by
its own entity stream: the stream of a declared saga type's entity whose id is the saga id
(``order:o-1`` for the order saga ``o-1``), so ``saga_type`` is that entity type. It
starts with its first applied event and ends with its first status event (its type's
``statuses.event``) whose status is one of its type's ``final`` statuses; a saga not there
yet counts as ``IN_FLIGHT``. Only declared saga types are counted: a stream of any other
type is no saga here (it would otherwise never see a final status and count as in flight
forever), so a new saga is counted, with its own outcomes, once it is declared. Sagas are
grouped by their UTC start day. Percentiles are exact and interpolate linearly between the
two nearest durations (numpy's default, ``statistics.quantiles(method="inclusive")``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sagas.catalog import SAGA_TYPES
from sagas.projections.declare import SagaType, subtypes
from spark_projections import gate
from spark_projections.tables import saga_daily_reasons

IN_FLIGHT = "IN_FLIGHT"
REASON_CHARS: int = getattr(saga_daily_reasons.c.reason.type, "length", None) or 500


def sagas(gated: DataFrame, saga_types: tuple[SagaType, ...] = SAGA_TYPES) -> DataFrame:
    """One row per saga: type, start, end, outcome, reason and duration (ms)."""
    entity_type = F.substring_index(F.col("entity_key"), ":", 1)
    declared = [s.entity_type for s in saga_types]
    own = (
        gate.applied(gated)
        .where(
            F.col("known")
            & F.col("saga_id").isNotNull()
            & entity_type.isin(*declared)
            & (F.col("entity_key") == F.concat(entity_type, F.lit(":"), F.col("saga_id")))
        )
        .withColumn("entity_type", entity_type)
    )
    final = _final(saga_types)
    ending = F.struct("sequence", "occurred_at", F.col("p.status").alias("status"), "p.reason")
    per_saga = own.groupBy("saga_id", "entity_type").agg(
        F.min_by("occurred_at", "sequence").alias("started_at"),
        F.min_by(F.when(final, ending), F.when(final, F.col("sequence"))).alias("end"),
    )
    return per_saga.select(
        "saga_id",
        F.col("entity_type").alias("saga_type"),
        "started_at",
        F.coalesce("end.status", F.lit(IN_FLIGHT)).alias("outcome"),
        F.col("end.reason").alias("reason"),
        (_millis(F.col("end.occurred_at")) - _millis(F.col("started_at"))).alias("duration_ms"),
    )


def _final(saga_types: tuple[SagaType, ...]) -> Column:
    """The event ends its saga: its type's status event, with one of its final statuses."""
    final = F.lit(False)
    for saga in saga_types:
        statuses = saga.statuses
        final = final | (
            (F.col("entity_type") == F.lit(saga.entity_type))
            & F.col("type").isin(*sorted(subtypes(statuses.event)))
            & F.col("p.status").isin(*sorted(statuses.final))
        )
    return final


def daily_stats(saga_rows: DataFrame) -> DataFrame:
    return saga_rows.groupBy(_day(), "saga_type", "outcome").agg(
        F.count(F.lit(1)).alias("count"),
        F.percentile("duration_ms", F.lit(0.5)).alias("p50_ms"),
        F.percentile("duration_ms", F.lit(0.95)).alias("p95_ms"),
    )


def daily_reasons(saga_rows: DataFrame) -> DataFrame:
    with_reason = saga_rows.where(F.col("reason").isNotNull()).withColumn(
        "reason", F.substring("reason", 1, REASON_CHARS)
    )
    return with_reason.groupBy(_day(), "saga_type", "outcome", "reason").agg(
        F.count(F.lit(1)).alias("count")
    )


def _day() -> Column:
    return F.to_date("started_at").alias("day")


def _millis(ts: Column) -> Column:
    return F.unix_micros(ts) / F.lit(1000.0)
