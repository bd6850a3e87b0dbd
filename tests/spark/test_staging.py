"""Staging tables filled through ``COPY`` (PostgreSQL) hold exactly what Spark had: every
text the format escapes or could mistake for another (a backslash, a tab, a line break,
a carriage return, ``\\N``, an empty text, spaces at either end, a quote, non-ASCII), null
beside it, times to the microsecond in the first year and with a zone, days, decimals,
floats and integers at their limits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from sqlalchemy import Engine, MetaData, Table, select

from readside import schema
from spark_projections import staging, tables
from tests.integration.readside import fresh_database, read_engine

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TEXTS = (
    "back\\slash",
    "a\ttab",
    "line\nbreak",
    "carriage\rreturn",
    "\\N",
    "\\.",
    "",
    "  spaces at both ends  ",
    'a "quote", a comma',
    "ünïcødé ✓ 🎉",
    "\\\\n not a line break",
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        yield engine


def _copied(spark: SparkSession, engine: Engine, tmp: Path, table: Table, rows: list[Any]) -> Any:
    staging.recreate(engine, (table,))
    frame = spark.createDataFrame(rows, schema=[c.name for c in table.columns])
    frame = frame.select(*[frame[c.name].cast(_spark_type(c)) for c in table.columns])
    staging.write(frame, staging.Copy(engine, tmp), table)
    staged = staging.bare_copy(table, MetaData())
    with engine.connect() as conn:
        conn.exec_driver_sql("SET TIME ZONE 'UTC'")  # year 1 in any zone is a Python time
        return sorted(conn.execute(select(*staged.columns)).all(), key=repr)


def _spark_type(column: Any) -> str:
    kind = column.type.__visit_name__
    if kind == "numeric":
        return f"decimal({column.type.precision},{column.type.scale})"
    return {
        "string": "string",
        "text": "string",
        "integer": "int",
        "big_integer": "bigint",
        "datetime": "timestamp",
        "date": "date",
        "float": "double",
    }[kind]


def test_texts_and_nulls_come_back_as_written(
    spark: SparkSession, engine: Engine, tmp_path: Path
) -> None:
    rows: list[tuple[str, int, int, str, str | None]] = [
        ("t", n, 2**40 + n, text, text) for n, text in enumerate(TEXTS)
    ]
    rows.append(("t", len(TEXTS), -1, "no raw", None))
    got = _copied(spark, engine, tmp_path, tables.rebuild_rejects, rows)
    assert got == sorted([tuple(r) for r in rows], key=repr)


def test_times_days_and_numbers_come_back_as_written(
    spark: SparkSession, engine: Engine, tmp_path: Path
) -> None:
    times = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(9999, 12, 31, 12, 0, 0, 1, tzinfo=UTC),
    ]
    timeline = [
        (f"s{n}", f"order:{n}", 2**31 - 1 - n, "order.Placed", t, TEXTS[n])
        for n, t in enumerate(times)
    ]
    got = _copied(spark, engine, tmp_path, schema.saga_timeline, timeline)
    assert got == sorted(timeline, key=repr)
    stats = [
        (date(2024, 2, 29), "order", "CONFIRMED", 2**62, 0.1 + 0.2, 1e300),
        (date(1, 1, 1), "order", "IN_FLIGHT", 0, None, None),
        (date(2024, 3, 1), "order", "REJECTED", 1, -0.0, 123456789.25),
    ]
    got = _copied(spark, engine, tmp_path, tables.saga_daily_stats, stats)
    assert got == sorted(stats, key=repr)


def test_money_comes_back_to_the_cent(spark: SparkSession, engine: Engine, tmp_path: Path) -> None:
    table = schema.MODEL_TABLES["orders"]
    money = [c for c in table.columns if c.type.__visit_name__ == "numeric"]
    assert money, "orders has a money column"
    values = [Decimal("0.00"), Decimal("-999999999999.99"), Decimal("0.01")]
    rows = []
    for n, amount in enumerate(values):
        row = {c.name: _sample(c, n) for c in table.columns}
        row.update({c.name: amount for c in money})
        rows.append(tuple(row[c.name] for c in table.columns))
    got = _copied(spark, engine, tmp_path, table, rows)
    assert got == sorted(rows, key=repr)


def _sample(column: Any, n: int) -> Any:
    kind = column.type.__visit_name__
    if kind in ("integer", "big_integer"):
        return n
    if kind == "datetime":
        return datetime(2024, 1, 1, 0, 0, n, 500, tzinfo=UTC)
    return f"{column.name}-{n}"
