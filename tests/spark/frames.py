"""Records as the Kafka source gives them, built in memory (no broker) for the unit tests."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tests.spark.history import Raw
from tests.spark.reference import Record

TOPIC = "unit.events"
PARTITIONS = 4
T_LOG = datetime(2024, 6, 1, tzinfo=UTC)
RECORD_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
    ]
)


def place(raws: Iterable[Raw]) -> list[Record]:
    """Partition by key as Kafka would (a stable hash; no key -> partition 0) and number
    each partition's records from 0, in the given order."""
    next_offset = [0] * PARTITIONS
    placed = []
    for key, value in raws:
        partition = 0 if key is None else zlib.crc32(key) % PARTITIONS
        placed.append((partition, next_offset[partition], key, value))
        next_offset[partition] += 1
    return placed


def records_frame(spark: SparkSession, records: list[Record]) -> DataFrame:
    rows: list[tuple[Any, ...]] = [
        (TOPIC, p, o, T_LOG + timedelta(milliseconds=o), k, v) for p, o, k, v in records
    ]
    return spark.createDataFrame(rows, RECORD_SCHEMA)
