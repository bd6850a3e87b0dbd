"""A rebuild killed midway leaves the old read models untouched and served.

``sagaline rebuild`` runs as a real process against a database the projector has filled.
It is SIGKILLed (with its JVM and Python workers) while it pauses after filling every staging
table, just before the swap (``SAGALINE_REBUILD_PAUSE_BEFORE_SWAP_S``, a test hook). The live
tables must hold exactly what they held, the API must still answer from them, and the next
rebuild must clean up the leftovers and swap in the same models.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession
from sqlalchemy import inspect

from readside import schema
from runtime.settings import Settings
from runtime.topics import create_topics
from services.api.app import create_api
from spark_projections import staging, swap
from spark_projections.job import run
from tests.integration.harness import auth_headers, isolated_settings, settings_env
from tests.integration.readside import fresh_database, produce, read_engine, snapshot
from tests.spark import history
from tests.spark.test_equality import project

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def start_rebuild(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = settings_env(settings) | {"SAGALINE_REBUILD_PAUSE_BEFORE_SWAP_S": "300"}
    with open(log, "wb") as out:
        # Its own process group: the kill takes the JVM and the Python workers with it.
        return subprocess.Popen(
            [sys.executable, "-m", "sagaline.cli", "rebuild"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"rebuild exited early:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} after {timeout}s:\n{log.read_text()[-3000:]}")


async def served(settings: Settings, order_id: str, product_id: str) -> tuple[str, int, int]:
    """What the API answers for one order, its saga and one product."""
    api = create_api(settings)
    transport = httpx.ASGITransport(app=api)
    async with (
        api.router.lifespan_context(api),
        httpx.AsyncClient(
            transport=transport, base_url="http://api", headers=auth_headers(settings)
        ) as http,
    ):
        order = await http.get(f"/orders/{order_id}")
        saga = await http.get(f"/sagas/{order_id}")
        stock = await http.get(f"/products/{product_id}/stock")
    assert order.status_code == saga.status_code == stock.status_code == 200, order.text
    return order.json()["status"], len(saga.json()["steps"]), stock.json()["on_hand"]


async def test_a_killed_rebuild_leaves_the_old_models_intact_and_served(
    tmp_path: Path, spark: SparkSession
) -> None:
    settings = isolated_settings(tmp_path, log_level="WARNING")
    await create_topics(settings)
    events = history.order_history(200, products=5, seed=31)
    ends = await produce(settings, list(history.encoded(events)))
    with fresh_database("postgresql", tmp_path) as url:
        live = settings.model_copy(update={"database_url": url})
        await project(live, url, ends)
        with read_engine(url) as engine:
            before = snapshot(engine)
        answers = await served(live, "o0000007", "p1")

        log = tmp_path / "rebuild.log"
        proc = start_rebuild(live, log)
        try:
            await asyncio.to_thread(wait_for, log, "stage=pause", proc, 240)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

        with read_engine(url) as engine:
            assert snapshot(engine) == before
            leftovers = set(inspect(engine).get_table_names())
        assert staging.staging_name(schema.saga_timeline) in leftovers  # it was midway
        assert await served(live, "o0000007", "p1") == answers

        await asyncio.to_thread(run, live, emit=lambda _: None, spark=spark)
        with read_engine(url) as engine:
            assert snapshot(engine) == before
            names = set(inspect(engine).get_table_names())
        assert not {staging.staging_name(t) for t in swap.STAGED} & names
