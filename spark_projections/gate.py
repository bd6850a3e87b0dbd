"""Per-entity sequence gating over the whole log, natively: the end state of
:func:`sagas.projections.ordering.gate` applied batch after batch.

Whatever the order events sit in the topic and however the projector batches them, an
entity ends with: every sequence 1..n that is present without a gap applied (n = its last
sequence), every later sequence held, and every further copy of a sequence counted as a
duplicate. Of two copies the first one read is kept (the projector keeps the held copy,
which it read first); within a partition that is the lower offset.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

APPLIED = "applied"
HELD = "held"
DUPLICATE = "duplicate"
UNTRIAGED = "untriaged"
"""A record the native checks did not vouch for, outside every sequence until triaged."""


def with_gate(events: DataFrame) -> DataFrame:
    """Adds ``gate``: ``applied``, ``held``, ``duplicate`` or ``untriaged``.

    One window per entity, ordered by sequence: a row is the first copy of its sequence when
    the previous row has another sequence; a running count of first copies is the rank of
    the sequence among distinct ones, and the sequence is applied while it equals that rank
    (1, 2, 3... with no gap so far).
    """
    by_entity = Window.partitionBy("entity_key").orderBy("sequence", "offset", "partition")
    previous = F.lag("sequence").over(by_entity)
    first = previous.isNull() | (previous != F.col("sequence"))
    rank = F.sum(first.cast("int")).over(
        by_entity.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        events.withColumn("_first", first)
        .withColumn("_rank", rank)
        .withColumn("gate", _verdict(F.col("_first"), F.col("_rank")))
        .drop("_first", "_rank")
    )


def _verdict(first: Column, rank: Column) -> Column:
    return (
        F.when(~F.col("fast"), F.lit(UNTRIAGED))
        .when(~first, F.lit(DUPLICATE))
        .when(F.col("sequence") == rank, F.lit(APPLIED))
        .otherwise(F.lit(HELD))
    )


def applied(gated: DataFrame) -> DataFrame:
    return gated.where(F.col("gate") == APPLIED)


def held(gated: DataFrame) -> DataFrame:
    return gated.where(F.col("gate") == HELD)
