"""The Spark replay equals the local replay on the same history: every key's decisions,
divergences (by kind, in order), statuses and reasons for not replaying, for the unchanged
definitions, a lower payment limit and a skipped compensation: on records given to Spark as
a frame, and on the same history written to real Kafka topics and read by Spark's Kafka
source as ``sagaline replay --spark`` reads it (the local replay reading them with its own
consumer)."""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from sagaline.replay_spark import replay_on_spark
from sagas.catalog import PROCESS_CHANNELS
from sagas.machinery.process import Process
from sagas.machinery.replay import Candidate, Replay, replay_all
from sagas.machinery.step import EVENTS_CHANNEL
from services.replay.history import Raw, assemble, read_history
from spark_projections.replay import spark_replay
from tests.integration.harness import broker_reachable, isolated_settings
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


async def write_traffic(settings: Settings) -> int:
    """The unit tests' traffic written to the process topics and the event topic, each
    message keyed as the worker keys it and in the order the bus delivered (or published)
    it; returns how many records."""
    bus = traffic()
    sent = list(bus.delivered) + [(EVENTS_CHANNEL, e) for e in bus.published]
    producer = AIOKafkaProducer(**aiokafka_options(settings), enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for channel, envelope in sent:
            topic = settings.topic(EVENTS if channel == EVENTS_CHANNEL else channel)
            await producer.send_and_wait(topic, envelope.encode(), key=envelope.key.encode())
    finally:
        await producer.stop()
    return len(sent)


def test_the_replay_read_by_spark_s_kafka_source_equals_the_local_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert broker_reachable(), "no Kafka broker: run deploy/local/kafka.sh start"
    settings = isolated_settings(tmp_path, log_level="WARNING")
    asyncio.run(create_topics(settings))
    written = asyncio.run(write_traffic(settings))
    history = asyncio.run(read_history(settings, PROCESS_CHANNELS))
    assert history.records == written and history.undecodable == 0
    for candidates, baselines in (
        (definitions(), None),
        (definitions(limit=Decimal("50")), definitions()),
        (definitions(saga=ForgetfulOrderSaga()), definitions()),
    ):
        mine = {p.name: Candidate(p) for p in candidates}
        theirs = None if baselines is None else {p.name: Candidate(p) for p in baselines}
        local = replay_all(history.histories, mine, history.recording, theirs, history.until)
        distributed = replay_on_spark(settings, mine, theirs, spark=spark)
        assert shape(distributed) == shape(local)
        assert distributed.unattributed == local.unattributed == 0
        assert len(local.keys) > 15
        assert any(k.diverging for k in local.keys) == (baselines is not None)
    assert spark.range(3).count() == 3  # the shared session is left open
