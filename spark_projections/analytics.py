"""Daily saga analytics, which only a job that sees the whole log at once does well.

The saga types are the declared ones (:data:`sagas.catalog.SAGA_TYPES`). A saga is told by
its own entity stream: the stream of a declared saga type's entity whose id is the saga id
(``order:o-1`` for the order saga ``o-1``), so ``saga_type`` is that entity type. It
starts with its first applied event. Its outcome is one of its own statuses, read from its
status events (its type's ``statuses.event``):

- its first status event with one of its type's ``final`` statuses ends it: that status is
  its outcome for good (an order's ``CONFIRMED``, an enrollment's ``DROPPED``);
- else, when its latest status event has a ``settled`` status, the saga rests there and that
  is its outcome as of the end of the log (an enrollment ``ENROLLED`` or ``WAITLISTED``: no
  reply is awaited, but a drop, a transfer or a promotion may move it later, so tomorrow's
  rebuild may count it under another status; the analytics are recomputed from the whole
  log every night, so a day's counts always describe where its sagas stand now);
- else (``PENDING``, ``TRANSFERRING``, or no status yet) it counts as ``IN_FLIGHT``.

Its reason is that status event's ``reason`` (why it failed, or why a transfer was refused
while it rests ``ENROLLED``) and its duration runs from its start to that event (to the
final status; for a resting one, to the status it rests in: a promoted enrollment's time
on the waitlist counts, as does a transfer's). For a saga whose settled statuses are its
final ones (orders) this is simply "first final status, else in flight". Only declared saga
types are counted: a stream of any other
type is no saga here (it would otherwise never see a final status and count as in flight
forever), so a new saga is counted, with its own outcomes, once it is declared. Sagas are
grouped by their UTC start day. Percentiles are exact and interpolate linearly between the
two nearest durations (numpy's default, ``statistics.quantiles(method="inclusive")``).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sagas.catalog import SAGA_TYPES
from sagas.machinery.statuses import SagaStatuses
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
    final = _status_in(saga_types, lambda s: s.final)
    is_status = _status_event(saga_types)
    ending = F.struct("sequence", "occurred_at", F.col("p.status").alias("status"), "p.reason")
    per_saga = own.groupBy("saga_id", "entity_type").agg(
        F.min_by("occurred_at", "sequence").alias("started_at"),
        F.min_by(F.when(final, ending), F.when(final, F.col("sequence"))).alias("final"),
        F.max_by(F.when(is_status, ending), F.when(is_status, F.col("sequence"))).alias("last"),
    )
    resting = _status_in(saga_types, lambda s: s.settled, F.col("last.status"))
    ended = per_saga.withColumn("end", F.coalesce(F.col("final"), F.when(resting, F.col("last"))))
    return ended.select(
        "saga_id",
        F.col("entity_type").alias("saga_type"),
        "started_at",
        F.coalesce("end.status", F.lit(IN_FLIGHT)).alias("outcome"),
        F.col("end.reason").alias("reason"),
        (_millis(F.col("end.occurred_at")) - _millis(F.col("started_at"))).alias("duration_ms"),
    )


def _status_event(saga_types: tuple[SagaType, ...]) -> Column:
    """The event is its saga type's status event."""
    found = F.lit(False)
    for saga in saga_types:
        found = found | (
            (F.col("entity_type") == F.lit(saga.entity_type))
            & F.col("type").isin(*sorted(subtypes(saga.statuses.event)))
        )
    return found


def _status_in(
    saga_types: tuple[SagaType, ...],
    chosen: Callable[[SagaStatuses], frozenset[str]],
    status: Column | None = None,
) -> Column:
    """``status`` (the event's own, by default: then it must be its type's status event) is
    one of the ``chosen`` statuses of its saga type."""
    found = F.lit(False)
    for saga in saga_types:
        match = F.col("entity_type") == F.lit(saga.entity_type)
        if status is None:
            match = match & F.col("type").isin(*sorted(subtypes(saga.statuses.event)))
        value = F.col("p.status") if status is None else status
        found = found | (match & value.isin(*sorted(chosen(saga.statuses))))
    return F.coalesce(found, F.lit(False))


def daily_stats(saga_rows: DataFrame) -> DataFrame:
    return (
        saga_rows.groupBy(_day(), "saga_type", "outcome")
        .agg(
            F.count(F.lit(1)).alias("count"),
            # Both in one aggregate: one buffer of the durations, not two.
            F.percentile("duration_ms", [0.5, 0.95]).alias("_p"),
        )
        .select(
            "day",
            "saga_type",
            "outcome",
            "count",
            F.get(F.col("_p"), 0).alias("p50_ms"),
            F.get(F.col("_p"), 1).alias("p95_ms"),
        )
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
