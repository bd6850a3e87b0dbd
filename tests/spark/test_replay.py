"""The Spark replay equals the local replay on the same history: every key's decisions,
divergences (by kind, in order), statuses and reasons for not replaying, for the unchanged
definitions, a lower payment limit and a skipped compensation."""

from __future__ import annotations

import zlib
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sagas.machinery.process import Process
from sagas.machinery.replay import Candidate, Replay, replay_all
from services.replay.history import Raw, assemble
from spark_projections.replay import spark_replay
from tests.unit.replay_bug import ForgetfulOrderSaga
from tests.unit.test_replay import definitions, traffic

pytestmark = pytest.mark.spark

PARTITIONS = 3


def recorded() -> list[Raw]:
    """The unit tests' traffic as Kafka records: each key's records in its partition, in
    the order the bus delivered (or published) them."""
    bus = traffic()
    sent = list(bus.delivered) + [("events", e) for e in bus.published]
    offsets: Counter[tuple[str, int]] = Counter()
    raws = []
    for channel, envelope in sent:
        partition = zlib.crc32(envelope.key.encode()) % PARTITIONS
        raws.append(Raw(channel, partition, envelope.encode(), offsets[(channel, partition)]))
        offsets[(channel, partition)] += 1
    return raws


def shape(replay: Replay) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {
        (k.channel, k.key): (
            k.decisions,
            tuple(c.differences for c in sorted(k.diverging, key=lambda c: (c.at, c.cause))),
            k.not_replayable,
            k.status_before,
            k.status_after,
        )
        for k in replay.keys
    }


def both(
    spark: SparkSession,
    candidates: tuple[Process[Any], ...],
    baselines: tuple[Process[Any], ...] | None = None,
) -> tuple[Replay, Replay]:
    raws = recorded()
    mine = {p.name: Candidate(p) for p in candidates}
    theirs = None if baselines is None else {p.name: Candidate(p) for p in baselines}
    earliest = {("payment", 1): 2}  # one partition lost records: its keys' starts count
    history = assemble(raws, earliest)
    local = replay_all(history.histories, mine, history.recording, theirs, history.until)
    frame = spark.createDataFrame(
        [(f"t.{r.channel}", r.partition, r.offset, bytearray(r.value or b"")) for r in raws],
        "topic string, partition int, offset long, value binary",
    )
    channels = {f"t.{r.channel}": r.channel for r in raws}
    distributed = spark_replay(frame, channels, mine, theirs, earliest, {})
    return local, distributed


def test_the_unchanged_replay_is_the_same_on_spark(spark: SparkSession) -> None:
    local, distributed = both(spark, definitions())
    assert shape(distributed) == shape(local)
    assert distributed.unattributed == local.unattributed
    assert len(local.keys) > 15


def test_a_lower_limit_and_a_skipped_compensation_diverge_alike_on_spark(
    spark: SparkSession,
) -> None:
    for candidates in (
        definitions(limit=Decimal("50")),
        definitions(saga=ForgetfulOrderSaga()),
    ):
        local, distributed = both(spark, candidates, definitions())
        assert shape(distributed) == shape(local)
        assert any(k.diverging for k in local.keys)
