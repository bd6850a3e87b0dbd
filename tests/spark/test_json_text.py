"""A ``JsonList`` column as the projector's codec writes it, from Spark's ``to_json``: the
same text as Python's ``json.dumps`` for lists holding every kind of character a JSON
writer treats specially (non-ASCII, beyond the BMP, DEL, control characters, quotes and
backslashes, a backslash before a ``u``), nulls included."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from spark_projections.json_text import python_json
from tests.spark.compare import assertDataFrameEqual

pytestmark = pytest.mark.spark

TEXTS = [
    "plain",
    "",
    "é",
    "Zoë 😀 ✓",
    "\x7f",
    "\x00\x01\x08\t\n\x0b\x0c\r\x0e\x1a\x1f",
    'quote " and \\ backslash',
    "\\u000B is not an escape here",
    "\\\\u00e9",
    "\u2028\u2029\ufeff",
    "𝄞 beyond the BMP 🎻",
]


def test_json_text_is_what_json_dumps_writes(spark: SparkSession) -> None:
    item = StructType([StructField("name", StringType()), StructField("n", LongType())])
    schema = StructType(
        [
            StructField("i", LongType()),
            StructField("texts", ArrayType(StringType())),
            StructField("items", ArrayType(item)),
        ]
    )
    rows = [(i, [t, None, "x"], [(t, i), (None, None)]) for i, t in enumerate(TEXTS)]
    frame = spark.createDataFrame(rows, schema)
    nulls = {"ignoreNullFields": "false"}
    actual = frame.select(
        "i",
        python_json(F.to_json("texts", nulls)).alias("texts"),
        python_json(F.to_json("items", nulls)).alias("items"),
    )

    def dumps(value: object) -> str:
        return json.dumps(value, separators=(",", ":"))

    expected = [
        (
            i,
            dumps([t, None, "x"]),
            dumps([{"name": t, "n": i}, {"name": None, "n": None}]),
        )
        for i, t in enumerate(TEXTS)
    ]
    assertDataFrameEqual(actual, spark.createDataFrame(expected, actual.schema))
