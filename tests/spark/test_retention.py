"""The rebuild applies the read side's retention: with SAGALINE_READ_RETENTION_S on, it
leaves out exactly what the projector's prune deletes at the same cutoff.

A messy history of orders over two days and of enrollments (copies, events out of order
and late, gaps that never fill) is projected (its prune off, so nothing moves while it
runs) and rebuilt with a retention that puts the cutoff in the middle of the orders' days.
The projector's database is then pruned at the rebuild's own cutoff (its recorded start
minus the retention): every table must hold the same rows as the rebuilt one.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from sqlalchemy import select

from readside import codec, retention
from runtime.topics import create_topics
from spark_projections import tables
from spark_projections.job import run
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import BACKENDS, fresh_database, produce, read_engine, snapshot
from tests.spark import enrollments, history
from tests.spark.test_equality import project

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def two_days() -> list[tuple[bytes | None, bytes | None]]:
    orders = history.with_gaps(history.order_history(400, products=8, seed=17, days=2))
    return [
        *history.encoded(history.messy(orders, seed=18)),
        *history.encoded(enrollments.messy_enrollments(200, seed=19)),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_rebuild_leaves_out_what_the_projector_prunes(
    backend: str, tmp_path: Path, spark: SparkSession
) -> None:
    assert broker_reachable(), "no Kafka broker: run deploy/local/kafka.sh start"
    settings = isolated_settings(tmp_path, log_level="WARNING", projector_batch_size=97)
    await create_topics(settings)
    ends = await produce(settings, two_days())
    keep_s = (datetime.now(UTC) - (history.T0 + timedelta(days=1))).total_seconds()
    with fresh_database(backend, tmp_path) as online, fresh_database(backend, tmp_path) as rebuilt:
        await project(settings, online, ends)
        target = settings.model_copy(update={"database_url": rebuilt, "read_retention_s": keep_s})
        await asyncio.to_thread(run, target, emit=lambda _: None, spark=spark)
        with read_engine(rebuilt) as b:
            with b.connect() as conn:
                started = conn.execute(select(tables.rebuild_runs.c.started_at)).scalar_one()
            rebuilt_rows = snapshot(b)
        cutoff = codec.utc(started) - timedelta(seconds=keep_s)
        with read_engine(online) as a:
            whole = snapshot(a)
            pruned = retention.prune_sagas(a, cutoff, batch=50)
            projected = snapshot(a)
    assert pruned.sagas > 0 and pruned.timeline > 0 and pruned.positions > 0
    assert 0 < len(projected["orders"]) < len(whole["orders"])
    for table, rows in projected.items():
        assert rebuilt_rows[table] == rows, table
