"""Staging tables: ``<table>__staging`` next to each live table, filled by Spark.

A staging table is created bare (no key, no index) so filling it is a plain append; on
PostgreSQL the key and indexes are built once it is full, before the swap, under names
ending in ``__staging`` that the swap renames. A rebuild that dies leaves only staging
tables behind, and the next one drops them first.

On PostgreSQL Spark writes each table as files in ``COPY``'s text format to the run's
scratch directory and the driver streams them in with ``COPY ... FROM STDIN`` (several
times cheaper for the server than batched ``INSERT``s, BENCHMARKS.md issue 31); SQLite
takes JDBC inserts.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegralType,
    StringType,
    TimestampType,
)
from sqlalchemy import Column, Connection, Engine, Index, MetaData, Table, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.schema import CreateIndex
from sqlalchemy.sql.elements import quoted_name

SUFFIX = "__staging"
# SQLAlchemy's storage formats on SQLite, which the projector's rows use.
SQLITE_TIME = "yyyy-MM-dd HH:mm:ss.SSSSSS"
SQLITE_DAY = "yyyy-MM-dd"


def staging_name(table: Table) -> str:
    return f"{table.name}{SUFFIX}"


@dataclass(frozen=True)
class Jdbc:
    """SQLite: where Spark inserts, a JDBC URL and connection properties."""

    url: str
    properties: dict[str, str]
    batch_size: int


@dataclass(frozen=True)
class Copy:
    """PostgreSQL: the database the driver copies into, and where Spark writes the files."""

    engine: Engine
    scratch: Path


Target = Jdbc | Copy


def target(engine: Engine, database_url: str, batch_size: int, scratch: Path) -> Target:
    """How the staging tables of ``database_url`` (``engine``'s database) are filled."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return Jdbc(_sqlite_jdbc(url), _sqlite_properties(), batch_size)
    if url.get_backend_name() == "postgresql":
        return Copy(engine, scratch)
    raise ValueError(f"the rebuild writes PostgreSQL or SQLite, not {url.get_backend_name()}")


def _sqlite_jdbc(url: URL) -> str:
    if not url.database or url.database == ":memory:":
        raise ValueError("the rebuild needs a SQLite file, not an in-memory database")
    return f"jdbc:sqlite:{Path(url.database).resolve()}"


def _sqlite_properties() -> dict[str, str]:
    # The projector may be writing the same file: wait for its lock instead of failing.
    return {"driver": "org.sqlite.JDBC", "busy_timeout": "60000"}


# --- DDL ---------------------------------------------------------------------------------


def bare_copy(table: Table, metadata: MetaData) -> Table:
    """``table``'s columns under the staging name: no key, no index (filled first)."""
    columns = [
        Column(c.name, c.type, nullable=c.nullable, comment=c.comment) for c in table.columns
    ]
    return Table(staging_name(table), metadata, *columns)


def recreate(engine: Engine, tables: tuple[Table, ...]) -> None:
    """Drop what an earlier run left behind and create empty, bare staging tables."""
    metadata = MetaData()
    with engine.begin() as conn:
        for table in tables:
            conn.execute(text(f"DROP TABLE IF EXISTS {_q(conn, staging_name(table))}"))
            bare_copy(table, metadata).create(conn)


def drop(engine: Engine, tables: tuple[Table, ...]) -> None:
    with engine.begin() as conn:
        for table in tables:
            conn.execute(text(f"DROP TABLE IF EXISTS {_q(conn, staging_name(table))}"))


def add_keys(engine: Engine, tables: tuple[Table, ...]) -> None:
    """PostgreSQL: build each staging table's primary key and indexes (named ``...__staging``)
    now that it is full; after the swap they carry the live names again."""
    with engine.begin() as conn:
        for table in tables:
            name = _q(conn, staging_name(table))
            keys = ", ".join(_q(conn, c.name) for c in table.primary_key.columns)
            pk = _q(conn, f"{staging_name(table)}_pkey")
            conn.execute(text(f"ALTER TABLE {name} ADD CONSTRAINT {pk} PRIMARY KEY ({keys})"))
            for index in staged_indexes(table):
                conn.execute(CreateIndex(index))


def staged_indexes(table: Table) -> list[Index]:
    """``table``'s secondary indexes, rebound to its staging table and renamed."""
    staged = table.to_metadata(MetaData(), name=staging_name(table))
    for index in staged.indexes:
        index.name = quoted_name(f"{index.name}{SUFFIX}", None)
    return list(staged.indexes)


def exists(engine: Engine, table: Table) -> bool:
    return inspect(engine).has_table(table.name)


def _q(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


# --- data --------------------------------------------------------------------------------


def write(df: DataFrame, to: Target, table: Table, sqlite_writers: int = 1) -> None:
    """Append ``df`` (columns named like ``table``'s) to its staging table."""
    rows = df.select(*[c.name for c in table.columns])
    if isinstance(to, Copy):
        _copy(rows, to, table)
        return
    # One writer: SQLite has a single write lock, parallel tasks would only wait on it.
    (
        _sqlite_values(rows)
        .coalesce(sqlite_writers)
        .write.mode("append")
        .option("batchsize", str(to.batch_size))
        .jdbc(to.url, staging_name(table), properties=to.properties)
    )


def _copy(rows: DataFrame, to: Copy, table: Table) -> None:
    folder = to.scratch / f"copy-{table.name}"
    try:
        copy_lines(rows).write.mode("overwrite").text(str(folder))
        with to.engine.begin() as conn:
            # A staging table lost in a server crash is simply rebuilt; the swap runs in
            # another transaction, with the server's setting.
            conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
            columns = ", ".join(_q(conn, c.name) for c in table.columns)
            sql = f"COPY {_q(conn, staging_name(table))} ({columns}) FROM STDIN"
            psycopg_conn: Any = conn.connection.driver_connection
            with psycopg_conn.cursor() as cursor, cursor.copy(sql) as copy:
                for part in sorted(folder.glob("part-*")):
                    with part.open("rb") as lines:
                        while chunk := lines.read(COPY_CHUNK):
                            copy.write(chunk)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


COPY_CHUNK = 1 << 20


def copy_lines(df: DataFrame) -> DataFrame:
    """Each row as one line of ``COPY``'s text format: values separated by tabs, ``\\N``
    for null, a backslash, tab, line feed and carriage return in a text escaped; times with
    their offset, so they are read as the instants they are."""
    values = [
        F.coalesce(_copy_value(F.col(f.name), f.dataType), F.lit("\\N")) for f in df.schema.fields
    ]
    return df.select(F.concat_ws("\t", *values).alias("line"))


_COPY_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))
"""Backslash first: the escapes it introduces must not be escaped again."""


def _copy_value(column: SparkColumn, dtype: DataType) -> SparkColumn:
    if isinstance(dtype, StringType):
        for plain, escaped in _COPY_ESCAPES:
            # Nearly no value holds one: `contains` finds that faster than `replace` does.
            replaced = F.replace(column, F.lit(plain), F.lit(escaped))
            column = F.when(column.contains(plain), replaced).otherwise(column)
        return column
    if isinstance(dtype, TimestampType):
        return F.date_format(column, COPY_TIME)
    if isinstance(dtype, DateType | DecimalType | IntegralType | BooleanType | DoubleType):
        return column.cast("string")
    raise TypeError(f"no COPY text for a {dtype.simpleString()} column")


COPY_TIME = "yyyy-MM-dd HH:mm:ss.SSSSSSxxx"


def _sqlite_values(df: DataFrame) -> DataFrame:
    """Values as SQLAlchemy stores them in SQLite: times as UTC text, money as a float."""
    converted = []
    for field in df.schema.fields:
        column = F.col(field.name)
        if isinstance(field.dataType, TimestampType):
            column = F.date_format(column, SQLITE_TIME)
        elif isinstance(field.dataType, DateType):
            column = F.date_format(column, SQLITE_DAY)
        elif isinstance(field.dataType, DecimalType):
            column = column.cast("double")
        converted.append(column.alias(field.name))
    return df.select(*converted)


def count(engine: Engine, table: Table) -> int:
    with engine.connect() as conn:
        value = conn.execute(text(f"SELECT count(*) FROM {_q(conn, staging_name(table))}"))
        return int(value.scalar_one())
