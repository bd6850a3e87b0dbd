"""Sagaline against a broker listener that requires SASL/SCRAM, as production clusters do.

The local broker (``deploy/local/kafka.sh``, started by ``make test``) has a second
listener, SASL_PLAINTEXT with SCRAM-SHA-256/512, on 127.0.0.1:9094
(``SAGALINE_KAFKA_SASL_PORT``), and a SCRAM user (``SAGALINE_KAFKA_SCRAM_USER`` /
``SAGALINE_KAFKA_SCRAM_PASSWORD``). Here every component reaches Kafka only through it: the
topics are created there, the worker runs as a real process, the API sends commands and
reads end offsets, the projector projects, and the Spark rebuild reads the event topic with
its Kafka source and rebuilds what the projector built. A wrong password, and a client that
does not log in at all, are refused with a sentence that says so.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.sql import SparkSession

from readside.migrate import upgrade
from runtime.kafka_security import KafkaUnreachable
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from services.api.app import create_api
from services.projector.offsets import EndOffsets
from services.projector.runner import Projector
from spark_projections.job import run
from tests.integration.harness import (
    auth_headers,
    isolated_settings,
    running_stack,
    settings_env,
)
from tests.integration.readside import read_engine, snapshot, wait_until_applied

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(400)]

SASL_BOOTSTRAP = f"127.0.0.1:{os.environ.get('SAGALINE_KAFKA_SASL_PORT', '9094')}"
USER = os.environ.get("SAGALINE_KAFKA_SCRAM_USER", "sagaline")
PASSWORD = os.environ.get("SAGALINE_KAFKA_SCRAM_PASSWORD", "sagaline-local")


def require_sasl_listener() -> None:
    host, port = SASL_BOOTSTRAP.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return
    except OSError:
        pytest.fail(
            f"no SASL listener at {SASL_BOOTSTRAP}: `deploy/local/kafka.sh start` adds one "
            "(a broker started before it had one must be restarted; SAGALINE_KAFKA_SASL_PORT "
            "names another port)",
            pytrace=False,
        )


def sasl_settings(
    tmp: Path, mechanism: str = "SCRAM-SHA-512", password: str = PASSWORD, **overrides: Any
) -> Settings:
    """Isolated settings whose every Kafka client logs in over SASL/SCRAM; the password is
    in a file, as a mounted secret would be."""
    secret = tmp / f"kafka-password-{uuid.uuid4().hex[:6]}"
    secret.write_text(password + "\n")
    return isolated_settings(
        tmp,
        kafka_bootstrap=SASL_BOOTSTRAP,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username=USER,
        kafka_sasl_password_file=secret,
        **overrides,
    )


def sagaline(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sagaline.cli", *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_a_wrong_password_or_no_login_is_refused_with_a_sentence(tmp_path: Path) -> None:
    require_sasl_listener()
    wrong = sasl_settings(tmp_path, mechanism="SCRAM-SHA-256", password="not-the-password")
    with pytest.raises(KafkaUnreachable) as refused:
        await create_topics(wrong)
    message = str(refused.value)
    assert message.startswith(
        f"cannot use Kafka at {SASL_BOOTSTRAP} over SASL_PLAINTEXT "
        f"(SCRAM-SHA-256 as user '{USER}'): "
    ), message
    assert "Authentication failed" in message and "wrong user name or password?" in message
    assert "not-the-password" not in message

    # The worker refuses to start, and says why, in one line (exit 1, no traceback).
    worker = sagaline(wrong, "worker")
    assert worker.returncode == 1, worker.stderr
    assert "refusing to start: cannot use Kafka" in worker.stderr
    assert "Authentication failed" in worker.stderr and "Traceback" not in worker.stderr
    assert "not-the-password" not in worker.stderr + worker.stdout

    # A client that does not log in at all gets nothing from this listener.
    plaintext = isolated_settings(tmp_path, kafka_bootstrap=SASL_BOOTSTRAP)
    with pytest.raises(KafkaUnreachable, match="over PLAINTEXT"):
        await create_topics(plaintext)


async def test_worker_api_projector_and_rebuild_run_over_sasl_scram(
    tmp_path: Path, spark: SparkSession
) -> None:
    require_sasl_listener()
    online, rebuilt = (f"sqlite:///{tmp_path / name}" for name in ("online.db", "rebuilt.db"))
    for url in (online, rebuilt):
        upgrade(url)
    settings = sasl_settings(tmp_path, database_url=online)
    await create_topics(settings)

    # The worker (a real process), the API's command bus and an event tail, all over SASL.
    async with running_stack(settings, tmp_path) as stack:
        await stack.set_stock("p1", 5)
        confirmed = await stack.place([("p1", 2)])
        rejected = await stack.place([("p1", 9)])
        outcomes = await stack.tail.wait_for([confirmed, rejected], 60)
    assert {k: o.status for k, o in outcomes.items()} == {
        confirmed: "CONFIRMED",
        rejected: "REJECTED",
    }

    # The projector, then the rebuild into a second database: the same rows.
    topic = settings.topic(EVENTS)
    end_offsets = EndOffsets(settings)
    try:
        ends = await end_offsets.get(topic)
    finally:
        await end_offsets.close()
    assert ends and sum(ends.values()) > 0
    with read_engine(online) as engine:
        stop = asyncio.Event()
        projector = asyncio.create_task(Projector(settings, engine).run(stop))
        try:
            await wait_until_applied(engine, topic, ends, timeout=120)
        finally:
            stop.set()
            await projector
        projected = snapshot(engine)
    target = settings.model_copy(update={"database_url": rebuilt})
    summary = await asyncio.to_thread(run, target, emit=lambda _: None, spark=spark)
    assert summary.events_read == sum(ends.values())
    with read_engine(rebuilt) as engine:
        assert snapshot(engine) == projected

    # The API as it starts in production (its lifespan: a producer and the end-offset
    # reader over SASL), serving the rebuilt models.
    api = create_api(target)
    transport = httpx.ASGITransport(app=api)
    async with (
        api.router.lifespan_context(api),
        httpx.AsyncClient(
            transport=transport, base_url="http://api", headers=auth_headers(target)
        ) as http,
    ):
        order = await http.get(f"/orders/{confirmed}")
        status = await http.get("/projections/status")
        accepted = await http.put("/products/p2/stock", json={"on_hand": 1})
    assert order.status_code == 200 and order.json()["status"] == "CONFIRMED", order.text
    assert status.status_code == 200 and status.json()["total_lag"] == 0, status.text
    assert accepted.status_code == 202, accepted.text
