"""The read side for tests: fresh migrated databases (PostgreSQL and SQLite), the projector
as a real process, raw event production, and whole-table snapshots to compare runs.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from faults.stack import local_pg_url
from readside import codec, schema, store
from readside.engine import create_read_engine
from readside.migrate import upgrade
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics, external_topics
from sagas.messages import Envelope
from tests.integration.harness import ServiceProcess, Stack, isolated_settings, running_stack

PG_URL = os.environ.get("SAGALINE_TEST_PG_URL") or local_pg_url()
"""deploy/local/postgres.sh's cluster, with the password it generated (.local/pg/pgpass)."""
BACKENDS = ("postgresql", "sqlite")
WALL_CLOCK_COLUMNS = {("pending_events", "held_since"), ("command_receipts", "applied_at")}
"""Columns that record when this run did something: they differ between two equal runs."""


@contextmanager
def fresh_database(backend: str, tmp: Path) -> Iterator[str]:
    """A new, migrated (never create_all) read-model database; its URL."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp / f'read-{uuid.uuid4().hex[:8]}.db'}"
        upgrade(url)
        yield url
        return
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        problem = None
    except OperationalError as exc:
        admin.dispose()
        problem = str(exc.orig).splitlines()[0]
    if problem is not None:  # fail, never skip: CI starts PostgreSQL, so this is a real error
        pytest.fail(
            f"PostgreSQL is not reachable at {make_url(PG_URL).render_as_string()}: start it "
            f"with `deploy/local/postgres.sh start` (it writes the password into "
            f".local/pg/pgpass) or set SAGALINE_TEST_PG_URL ({problem})",
            pytrace=False,
        )
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every read-model table, normalised (UTC times, cents), sorted; without
    the wall-clock columns."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for table in schema.metadata.sorted_tables:
            columns = [c for c in table.columns if (table.name, c.name) not in WALL_CLOCK_COLUMNS]
            rows = conn.execute(select(*columns)).all()
            tables[table.name] = sorted(tuple(_normal(v) for v in row) for row in rows)
    return tables


def _normal(value: Any) -> Any:
    if isinstance(value, datetime):
        return codec.utc(value)
    if isinstance(value, Decimal | float):
        return codec.money(value)
    return value


def applied_offsets(engine: Engine, topic: str) -> dict[int, int]:
    with engine.connect() as conn:
        return store.load_checkpoints(conn, topic)


async def produce(
    settings: Settings, records: Iterable[Envelope | tuple[bytes, bytes]]
) -> dict[int, int]:
    """Write envelopes (or raw key/value pairs) to the event topic in this order; returns
    the end offset per partition afterwards."""
    producer = AIOKafkaProducer(**aiokafka_options(settings), enable_idempotence=True, acks="all")
    await producer.start()
    topic = settings.topic(EVENTS)
    ends: dict[int, int] = {}
    try:
        futures = []
        for record in records:
            key, value = (
                (record.key.encode(), record.encode()) if isinstance(record, Envelope) else record
            )
            futures.append(await producer.send(topic, value, key=key))
        for meta in await asyncio.gather(*futures):
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    finally:
        await producer.stop()
    return ends


async def wait_until_applied(
    engine: Engine, topic: str, ends: dict[int, int], timeout: float = 60
) -> None:
    """Until the checkpoints reach ``ends`` (partition -> end offset)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        applied = await asyncio.to_thread(applied_offsets, engine, topic)
        if all(applied.get(p, 0) >= end for p, end in ends.items()):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"projector did not reach {ends}; applied: {applied_offsets(engine, topic)}"
    )


class ProjectorProcess(ServiceProcess):
    """``sagaline projector`` as a real process (it logs nothing to wait for at start)."""

    command = "projector"
    ready_marker = None


@contextmanager
def read_engine(url: str) -> Iterator[Engine]:
    engine = create_read_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


@asynccontextmanager
async def every_consumer(tmp: Path) -> AsyncIterator[tuple[Stack, Engine, ProjectorProcess]]:
    """A worker running every process (CDC on: Debezium's topics created empty, as Kafka
    Connect would, under a prefix of the run's own), the API, and a projector process into
    a fresh PostgreSQL database: for a test that sends records to every topic a component
    consumes."""
    settings = isolated_settings(tmp, cdc_enabled=True)
    settings = settings.model_copy(update={"cdc_topic_prefix": f"{settings.topic_prefix}-legacy"})
    await create_topics(settings, external_topics(settings))
    async with running_stack(settings, tmp) as stack:
        with fresh_database("postgresql", tmp) as url, read_engine(url) as engine:
            projector = ProjectorProcess(
                stack.settings.model_copy(update={"database_url": url}), tmp
            )
            projector.start()
            try:
                yield stack, engine, projector
            finally:
                projector.stop()
