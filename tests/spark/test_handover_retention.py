"""The handover with the read side's retention on: the projector keeps running (and pruning)
while the rebuild, which prunes its staging tables, runs and swaps. Pruned at one cutoff,
the database must then equal a fresh projection of the whole topic pruned at that cutoff:
no event applied twice or skipped, no expired saga brought back.

The cutoff lies past the whole history (it is dated 2024), so every saga final by then is
expired for every prune, whenever it runs. The history has no copies or late events: a copy
of an event that arrives after its saga was pruned finds no position (the README's
retention paragraph says what happens then), which is no question of the handover."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from readside import retention
from runtime.topics import EVENTS, create_topics
from services.projector.runner import Projector
from spark_projections.job import run
from tests.integration.harness import isolated_settings
from tests.integration.readside import (
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)
from tests.spark import history
from tests.spark.test_equality import project

pytestmark = [pytest.mark.spark, pytest.mark.integration]
T0 = history.T0


def thirds() -> tuple[list[tuple[bytes | None, bytes | None]], ...]:
    raws = list(history.encoded(history.order_history(300, products=6, seed=41)))
    n = len(raws) // 3
    return raws[:n], raws[n : 2 * n], raws[2 * n :]


async def test_the_handover_neither_loses_nor_doubles_with_retention_on(
    tmp_path: Path, spark: SparkSession
) -> None:
    keep_s = (datetime.now(UTC) - (T0 + timedelta(days=30))).total_seconds()
    settings = isolated_settings(
        tmp_path, log_level="WARNING", projector_batch_size=50, read_retention_s=keep_s
    )
    await create_topics(settings)
    before, during, after = thirds()
    topic = settings.topic(EVENTS)
    cutoff = T0 + timedelta(days=30)
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        live = settings.model_copy(update={"database_url": url, "rebuild_pause_before_swap_s": 3.0})
        stop = asyncio.Event()
        projector = asyncio.create_task(Projector(live, engine).run(stop))
        try:
            await wait_until_applied(engine, topic, await produce(live, before))
            offsets_fixed = threading.Event()

            def emit(line: str) -> None:
                if line.startswith("stage=read"):
                    offsets_fixed.set()

            rebuild = asyncio.create_task(asyncio.to_thread(run, live, emit=emit, spark=spark))
            await asyncio.to_thread(offsets_fixed.wait, 120)
            ends = await produce(live, during)
            await wait_until_applied(engine, topic, ends)  # past the rebuild's end offsets
            summary = await rebuild
            ends = await produce(live, after)
            await wait_until_applied(engine, topic, ends)
        finally:
            stop.set()
            await projector
        assert summary.handover.caught_up_records > 0
        retention.prune_sagas(engine, cutoff, batch=100)
        rebuilt_then_projected = snapshot(engine)
    with fresh_database("postgresql", tmp_path) as fresh:
        await project(settings.model_copy(update={"read_retention_s": 0.0}), fresh, ends)
        with read_engine(fresh) as engine:
            assert retention.prune_sagas(engine, cutoff, batch=100).sagas > 0
            projected = snapshot(engine)
    for table, rows in projected.items():
        assert rebuilt_then_projected[table] == rows, table
