"""The domain-event topic as a batch DataFrame, between offsets fixed before reading.

The end offsets are asked of the broker once, at start (or taken from the projector's
checkpoints): records that arrive while the job runs are left to the online projector,
which resumes exactly there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from pyspark.sql import DataFrame, SparkSession

from runtime.kafka_security import aiokafka_options, spark_kafka_options, unreachable
from runtime.settings import Settings
from runtime.topics import topic_partitions


@dataclass(frozen=True)
class Offsets:
    """Per partition: the first offset to read and the end (exclusive, the next offset)."""

    topic: str
    start: dict[int, int]
    end: dict[int, int]

    @property
    def records(self) -> int:
        return sum(self.end[p] - self.start[p] for p in self.end)

    def nonempty(self) -> dict[int, int]:
        """End offsets of the partitions that hold records in range (what the projector
        checkpoints: it writes a partition's next offset only once it read from it)."""
        return {p: e for p, e in sorted(self.end.items()) if e > self.start[p]}

    def describe(self) -> str:
        return " ".join(f"{p}:{self.start[p]}-{self.end[p]}" for p in sorted(self.end))


class TopicMissing(RuntimeError):
    """The events topic does not exist (or has no partitions)."""


class BrokerUnreachable(RuntimeError):
    """The rebuild could not ask the broker for the topic's offsets."""


async def fix_offsets(
    settings: Settings, topic: str, until: dict[int, int] | None = None
) -> Offsets:
    """Earliest and end offsets of every partition; ``until`` caps the ends (for example at
    the projector's checkpoints)."""
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    try:
        await consumer.start()
    except KafkaError as exc:
        await consumer.stop()
        raise BrokerUnreachable(str(await unreachable(settings, exc))) from exc
    try:
        tps = await topic_partitions(consumer, topic)
        if not tps:
            raise TopicMissing(f"topic {topic} does not exist (run `sagaline topics create`)")
        first = await consumer.beginning_offsets(tps)
        last = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    start = {tp.partition: first[tp] for tp in tps}
    end = {tp.partition: last[tp] for tp in tps}
    if until is not None:
        end = {p: max(start[p], min(e, until.get(p, start[p]))) for p, e in end.items()}
    return Offsets(topic, start, end)


def read_records(
    spark: SparkSession, settings: Settings, offsets: Offsets, min_partitions: int | None = None
) -> DataFrame:
    """Records in ``offsets`` with Spark's own Kafka source: topic, partition, offset,
    timestamp, key and value (bytes)."""
    topic = offsets.topic
    reader = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("assign", json.dumps({topic: sorted(offsets.end)}))
        .option("startingOffsets", json.dumps({topic: _by_name(offsets.start)}))
        .option("endingOffsets", json.dumps({topic: _by_name(offsets.end)}))
        # Offsets below the start were deleted by retention before we began: nothing lost.
        .option("failOnDataLoss", "false")
    )
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    return reader.load().select("topic", "partition", "offset", "timestamp", "key", "value")


def _by_name(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}
