"""SAGALINE_API_WORKERS: several API processes behind one port, on the shared broker.

`sagaline api` runs as a real process with two workers: the supervisor has two worker
processes, orders sent on separate connections with one key are all accepted, every
accepted order is on the saga topic once, and SIGTERM stops the supervisor and both workers
cleanly (exit 0, each runs its lifespan shutdown: producer and pools closed).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from runtime.topics import ORDER_SAGA, create_topics
from tests.integration.harness import (
    ServiceProcess,
    auth_headers,
    broker_reachable,
    free_port,
    isolated_settings,
    read_all,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not broker_reachable(), reason="needs the Kafka broker"),
]


class Api(ServiceProcess):
    command = "api"
    ready_marker = None  # two processes log their start: wait for the port instead


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


async def test_two_api_processes_serve_one_port_and_stop_cleanly(tmp_path: Path) -> None:
    settings = isolated_settings(
        tmp_path,
        api_workers=2,
        api_port=free_port(),
        database_url=f"sqlite:///{tmp_path}/read.db",
        shutdown_grace_s=8.0,
    )
    await create_topics(settings)
    api = Api(settings, tmp_path)
    api.start()
    assert api.proc is not None
    url = f"http://{settings.api_host}:{settings.api_port}"
    order = {
        "customer_id": "c-1",
        "lines": [{"product_id": "p-1", "quantity": 1, "unit_price": "1.00"}],
        "payment": {"method": "card"},
    }
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=url, headers=auth_headers(settings)) as http:
            while True:
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, api.tail_log()
                await asyncio.sleep(0.3)
            # Separate connections, so the kernel can hand them to either process.
            answers = []
            for i in range(20):
                async with httpx.AsyncClient(base_url=url, headers=auth_headers(settings)) as one:
                    answers.append(
                        await one.post("/orders", json=order, headers={"Idempotency-Key": f"k{i}"})
                    )
        assert [a.status_code for a in answers] == [202] * 20, api.tail_log()
        served_by = {
            p
            for p in children(api.proc.pid)
            if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
        }
        assert len(served_by) == 2, api.tail_log()
        records = await read_all(settings, ORDER_SAGA, timeout=10)
        assert sorted((r.key or b"").decode() for r in records) == sorted(
            a.json()["order_id"] for a in answers
        )
    finally:
        api.proc.send_signal(signal.SIGTERM)
        code = api.proc.wait(30)
    assert code == 0, api.tail_log()
    log = api.tail_log(20_000)
    assert log.count("Application shutdown complete") == 2, log
