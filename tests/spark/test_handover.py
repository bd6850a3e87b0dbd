"""The handover: the projector keeps running while the rebuild runs and swaps.

Events arrive before the rebuild fixes its end offsets, while it runs (the projector
applies them past the rebuild's ends) and after the swap. The rebuild swaps its models in,
re-applies what the projector had applied past its ends, and the projector goes on from
there. In the end the database must equal a fresh projection of the whole topic: nothing
applied twice, nothing skipped.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

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


def thirds() -> tuple[list[tuple[bytes | None, bytes | None]], ...]:
    events = history.messy(history.order_history(300, products=6, seed=41), seed=42)
    raws = list(history.encoded(events))
    n = len(raws) // 3
    return raws[:n], raws[n : 2 * n], raws[2 * n :]


async def test_the_projector_resumes_exactly_where_the_swapped_models_stand(
    tmp_path: Path, spark: SparkSession
) -> None:
    settings = isolated_settings(tmp_path, log_level="WARNING", projector_batch_size=50)
    await create_topics(settings)
    before, during, after = thirds()
    topic = settings.topic(EVENTS)
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        live = settings.model_copy(update={"database_url": url, "rebuild_pause_before_swap_s": 3.0})
        stop = asyncio.Event()
        projector = asyncio.create_task(Projector(live, engine).run(stop))
        try:
            await wait_until_applied(engine, topic, await produce(live, before))
            lines: list[str] = []
            offsets_fixed = threading.Event()

            def emit(line: str) -> None:
                lines.append(line)
                if line.startswith("stage=read"):
                    offsets_fixed.set()

            rebuild = asyncio.create_task(asyncio.to_thread(run, live, emit=emit, spark=spark))
            await asyncio.to_thread(offsets_fixed.wait, 120)
            ends = await produce(live, during)
            await wait_until_applied(engine, topic, ends)  # past the rebuild's end offsets
            summary = await rebuild
            ends = await produce(live, after)
            await wait_until_applied(engine, topic, ends)
            rebuilt_then_projected = snapshot(engine)
        finally:
            stop.set()
            await projector
        assert summary.handover.caught_up_records > 0, lines
    with fresh_database("postgresql", tmp_path) as fresh:
        await project(settings, fresh, ends)
        with read_engine(fresh) as engine:
            projected = snapshot(engine)
    for table, rows in projected.items():
        assert rebuilt_then_projected[table] == rows, table
