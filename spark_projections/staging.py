"""Staging tables: ``<table>__staging`` next to each live table, filled over JDBC.

A staging table is created bare (no key, no index) so Spark's inserts are plain appends;
on PostgreSQL the key and indexes are built once it is full, before the swap, under names
ending in ``__staging`` that the swap renames. A rebuild that dies leaves only staging
tables behind, and the next one drops them first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DecimalType, TimestampType
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
    """Where Spark writes: a JDBC URL and connection properties for the read-model DB."""

    url: str
    properties: dict[str, str]
    dialect: str
    batch_size: int

    @classmethod
    def of(cls, database_url: str, batch_size: int) -> Jdbc:
        url = make_url(database_url)
        if url.get_backend_name() == "sqlite":
            return cls(_sqlite_jdbc(url), _sqlite_properties(), "sqlite", batch_size)
        if url.get_backend_name() == "postgresql":
            return cls(_postgres_jdbc(url), _postgres_properties(url), "postgresql", batch_size)
        raise ValueError(f"the rebuild writes PostgreSQL or SQLite, not {url.get_backend_name()}")


def _postgres_jdbc(url: URL) -> str:
    host = url.host or "localhost"
    port = f":{url.port}" if url.port else ""
    # reWriteBatchedInserts turns each JDBC batch into multi-row INSERTs (several times
    # faster). Asynchronous commit: a staging table lost in a server crash is simply
    # rebuilt; the swap itself runs on another connection, with the server's setting.
    options = "options=-c%20synchronous_commit%3Doff"
    return f"jdbc:postgresql://{host}{port}/{url.database}?reWriteBatchedInserts=true&{options}"


def _postgres_properties(url: URL) -> dict[str, str]:
    props = {"driver": "org.postgresql.Driver", "ApplicationName": "sagaline-rebuild"}
    if url.username:
        props["user"] = url.username
    if url.password:
        props["password"] = str(url.password)
    return props


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


def write(df: DataFrame, jdbc: Jdbc, table: Table, sqlite_writers: int = 1) -> None:
    """Append ``df`` (columns named like ``table``'s) to its staging table."""
    rows = df.select(*[c.name for c in table.columns])
    if jdbc.dialect == "sqlite":
        # One writer: SQLite has a single write lock, parallel tasks would only wait on it.
        rows = _sqlite_values(rows).coalesce(sqlite_writers)
    (
        rows.write.mode("append")
        .option("batchsize", str(jdbc.batch_size))
        .jdbc(jdbc.url, staging_name(table), properties=jdbc.properties)
    )


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
