"""Every component's Prometheus metrics, scraped after a few sagas, with the right values.

One worker process, one projector process and the API (in this process) on an isolated
topic set and a fresh PostgreSQL database. Three orders: one confirmed, one declined, one
whose payment never answers (its step timeout fires); one poison record and one replayed
command on the order-saga topic. Then each ``/metrics`` must say exactly that.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from runtime.settings import Settings
from runtime.topics import EVENTS, ORDER_SAGA
from sagaline.wiring import build_processes
from sagas.catalog import running_channels
from tests.integration.harness import (
    Stack,
    isolated_settings,
    produce_raw,
    read_all,
    running_stack,
)
from tests.integration.readside import ProjectorProcess, fresh_database, read_engine

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; a missing series is an error naming what the page had."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        near = sorted(str(dict(k[1])) for k in samples if k[0] == name)
        raise AssertionError(f"no {name}{labels}; the page has {name} for {near}")
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def scrape_until(
    url: str, ready: Callable[[Samples], bool], timeout: float = 60, **kw: object
) -> Samples:
    """Scrape ``url`` until ``ready`` holds (the last scrape, for the caller's asserts)."""
    deadline = asyncio.get_running_loop().time() + timeout
    samples: Samples = {}
    async with httpx.AsyncClient() as http:
        while True:
            try:
                response = await http.get(url, timeout=10, **kw)  # type: ignore[arg-type]
                if response.status_code == 200:
                    assert response.headers["content-type"].startswith("text/plain")
                    samples = parse(response.text)
                    if ready(samples):
                        return samples
            except httpx.TransportError:
                pass  # not serving yet
            if asyncio.get_running_loop().time() > deadline:
                return samples
            await asyncio.sleep(0.5)


async def _run_orders(stack: Stack) -> dict[str, str]:
    await stack.set_stock("m1", 10)
    placed = {
        "card": await stack.place([("m1", 1)], method="card"),
        "decline": await stack.place([("m1", 1)], method="decline"),
        "hang": await stack.place([("m1", 1)], method="hang"),
    }
    outcomes = await stack.tail.wait_for(placed.values(), 90)
    return {method: outcomes[order].status for method, order in placed.items()}


async def test_worker_projector_and_api_metrics_after_a_few_sagas(tmp_path: Path) -> None:
    settings = isolated_settings(
        tmp_path, step_timeout_s=3.0, worker_memory_metrics=True, stall_after_s=1.0
    )
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        async with running_stack(settings, tmp_path) as stack:
            projector = ProjectorProcess(
                settings.model_copy(update={"database_url": url}), tmp_path
            )
            projector.start()
            try:
                await _check(stack, settings)
                await _check_last_rebuild(settings, engine)
            finally:
                projector.stop()


async def _check(stack: Stack, settings: Settings) -> None:
    outcomes = await _run_orders(stack)
    assert outcomes == {"card": "CONFIRMED", "decline": "CANCELLED", "hang": "CANCELLED"}, outcomes
    # A poison record, and the first order's command again (same message id: a duplicate).
    # The command is read before the poison is sent: read_all lists partition by partition,
    # so afterwards its first record could be the poison itself (replayed: a second letter).
    first = (await read_all(settings, ORDER_SAGA))[0]
    await produce_raw(settings, ORDER_SAGA, b"order:poison", b"{not json")
    await produce_raw(settings, ORDER_SAGA, first.key, first.value)

    worker = await scrape_until(
        f"http://127.0.0.1:{settings.worker_web_port}/metrics",
        lambda s: (
            total(s, "sagaline_worker_records_total", process=ORDER_SAGA, result="duplicate") >= 1
            and total(
                s, "sagaline_worker_records_total", process=ORDER_SAGA, result="dead_lettered"
            )
            >= 1
            and total(s, "sagaline_worker_lag_records", topic=settings.topic(ORDER_SAGA)) == 0
        ),
    )
    assert value(worker, "sagaline_sagas_started_total", saga_type="order") == 3
    # The opt-in memory gauges, read from the RocksDB databases Faust has open: one per
    # table and partition, and the order tables' writes sit in their memtables.
    tables = len(build_processes(settings))  # one table per process
    assert value(worker, "sagaline_worker_rocksdb_open_databases") == tables * settings.partitions
    assert value(worker, "sagaline_worker_rocksdb_memory_bytes", kind="memtables") > 0
    assert value(worker, "sagaline_worker_rocksdb_memory_bytes", kind="block_cache") >= 0
    assert value(worker, "sagaline_worker_python_allocated_blocks") > 10_000
    assert value(worker, "sagaline_worker_malloc_bytes", state="in_use") > 0
    assert value(worker, "sagaline_sagas_started_total", saga_type="enrollment") == 0
    finished = "sagaline_sagas_finished_total"
    assert value(worker, finished, saga_type="order", outcome="CONFIRMED") == 1
    assert value(worker, finished, saga_type="order", outcome="CANCELLED") == 2
    assert value(worker, finished, saga_type="order", outcome="REJECTED") == 0
    duration = "sagaline_saga_duration_seconds"
    assert value(worker, f"{duration}_count", saga_type="order") == 3
    # The timed-out order alone waited out its 3 s step timeout.
    assert value(worker, f"{duration}_bucket", saga_type="order", le="2.5") == 2
    assert value(worker, f"{duration}_sum", saga_type="order") >= 3.0
    steps = value(worker, "sagaline_saga_step_seconds_count", saga_type="order")
    assert steps >= 3 * 2  # every order took at least its placement's step and one reply's
    records = "sagaline_worker_records_total"
    assert value(worker, records, process=ORDER_SAGA, result="dead_lettered") == 1
    assert value(worker, records, process=ORDER_SAGA, result="duplicate") == 1
    assert value(worker, records, process=ORDER_SAGA, result="processed") >= 3
    assert value(worker, "sagaline_worker_deadlines_fired_total", process=ORDER_SAGA) == 1
    lag = {ls for (n, ls) in worker if n == "sagaline_worker_lag_records"}
    # every partition of every process topic the worker reads (CDC off: not the correlator's)
    assert len(lag) == settings.partitions * len(running_channels(settings.cdc_enabled))
    # Everything is processed, dead-lettered or skipped as a duplicate: no partition is
    # stalled, though each was checked every second against a 1 s threshold.
    assert value(worker, "sagaline_worker_stalled_partitions") == 0
    # The garbage collector as the worker command set it (runtime/gc_tuning.py).
    assert value(worker, "sagaline_gc_threshold") == settings.gc_threshold != 700
    assert value(worker, "sagaline_gc_frozen_objects") > 10_000
    assert ("sagaline_gc_seconds_total", frozenset({("generation", "2")})) in worker

    events = len(await read_all(settings, EVENTS))
    projector = await scrape_until(
        f"http://127.0.0.1:{settings.projector_metrics_port}/metrics",
        lambda s: total(s, "sagaline_projector_events_total", result="applied") >= events,
    )
    assert value(projector, "sagaline_projector_events_total", result="applied") == events
    assert value(projector, "sagaline_projector_events_total", result="duplicate") == 0
    assert value(projector, "sagaline_projector_events_total", result="dead_lettered") == 0
    assert 1 <= value(projector, "sagaline_projector_batches_total") <= events
    assert total(projector, "sagaline_projector_lag_records") == 0
    lagged = [ls for (n, ls) in projector if n == "sagaline_projector_lag_records"]
    assert len(lagged) == settings.partitions
    assert value(projector, "sagaline_projector_held_events") == 0
    assert value(projector, "sagaline_gc_threshold") == settings.gc_threshold
    assert value(projector, "sagaline_gc_frozen_objects") > 10_000

    refused = await stack.http.post("/orders", json={}, headers={"Authorization": "Bearer no"})
    assert refused.status_code == 401
    invalid = await stack.http.post("/orders", json={"customer_id": "c"})
    assert invalid.status_code == 422
    scraped = await stack.http.get("/metrics")
    assert scraped.status_code == 200, scraped.text
    api = parse(scraped.text)
    requests = "sagaline_api_requests_total"
    assert value(api, requests, route="/orders", method="POST", status="202") == 3
    assert value(api, requests, route="/orders", method="POST", status="401") == 1
    assert value(api, requests, route="/orders", method="POST", status="422") == 1
    stock = "/products/{product_id}/stock"
    assert value(api, requests, route=stock, method="PUT", status="202") == 1
    latency = "sagaline_api_request_seconds_count"
    assert value(api, latency, route="/orders", method="POST") == 5
    assert not any("m1" in str(ls) for (_n, ls) in api)  # ids never become labels
    no_key = await stack.http.get("/metrics", headers={"Authorization": ""})
    assert no_key.status_code == 401


async def _check_last_rebuild(settings: Settings, engine: Engine) -> None:
    """The projector reads the last swapped rebuild from ``rebuild_runs`` (as the Spark job
    writes it) and shows its time, duration, events and rows per table."""
    url = f"http://127.0.0.1:{settings.projector_metrics_port}/metrics"
    none = await scrape_until(url, lambda s: "sagaline_rebuild_last_events_read" in str(s))
    assert value(none, "sagaline_rebuild_last_swapped_timestamp_seconds") == 0
    assert value(none, "sagaline_rebuild_last_result", result="swapped") == 0
    assert value(none, "sagaline_rebuild_last_result", result="failed") == 0
    assert not [k for k in none if k[0] == "sagaline_rebuild_last_rows"]
    runs = [
        ("old", datetime(2026, 1, 1, 3, 30, tzinfo=UTC), datetime(2026, 1, 1, 3, 31, tzinfo=UTC)),
        (
            "new",
            datetime(2026, 1, 2, 3, 30, tzinfo=UTC),
            datetime(2026, 1, 2, 3, 32, 5, 500000, tzinfo=UTC),
        ),
    ]
    with engine.begin() as conn:
        for run_id, started, swapped in runs:
            conn.execute(
                text(
                    "INSERT INTO rebuild_runs (run_id, topic, started_at, swapped_at, offsets, "
                    "caught_up, events_read, rows) VALUES (:run_id, :topic, :started, :swapped, "
                    "'{}', '{}', :events, :rows)"
                ),
                {
                    "run_id": run_id,
                    "topic": settings.topic(EVENTS),
                    "started": started,
                    "swapped": swapped,
                    "events": 4321 if run_id == "new" else 1,
                    "rows": json.dumps(
                        {"orders": 3, "product_stock": 1} if run_id == "new" else {"orders": 9}
                    ),
                },
            )
    newest = datetime(2026, 1, 2, 3, 32, 5, 500000, tzinfo=UTC).timestamp()
    seen = await scrape_until(
        url,
        lambda s: s.get(("sagaline_rebuild_last_swapped_timestamp_seconds", frozenset())) == newest,
        timeout=30,
    )
    assert value(seen, "sagaline_rebuild_last_swapped_timestamp_seconds") == newest
    assert value(seen, "sagaline_rebuild_last_duration_seconds") == 125.5
    assert value(seen, "sagaline_rebuild_last_events_read") == 4321
    assert value(seen, "sagaline_rebuild_last_rows", table="orders") == 3
    assert value(seen, "sagaline_rebuild_last_rows", table="product_stock") == 1
    assert len([k for k in seen if k[0] == "sagaline_rebuild_last_rows"]) == 2
    assert value(seen, "sagaline_rebuild_last_result", result="swapped") == 1
    assert value(seen, "sagaline_rebuild_last_result", result="failed") == 0

    # A later attempt fails (the Spark job writes rebuild_failures): the result says so,
    # the numbers stay those of the models being served, the last swapped ones.
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO rebuild_failures (run_id, topic, started_at, failed_at, stage, "
                "error) VALUES ('bad', :topic, :started, :failed, 'offsets', 'TopicMissing')"
            ),
            {
                "topic": settings.topic(EVENTS),
                "started": datetime(2026, 1, 3, 3, 30, tzinfo=UTC),
                "failed": datetime(2026, 1, 3, 3, 30, 2, tzinfo=UTC),
            },
        )
    failed = await scrape_until(
        url,
        lambda s: s.get(("sagaline_rebuild_last_result", frozenset({("result", "failed")}))) == 1,
        timeout=30,
    )
    assert value(failed, "sagaline_rebuild_last_result", result="failed") == 1
    assert value(failed, "sagaline_rebuild_last_result", result="swapped") == 0
    assert value(failed, "sagaline_rebuild_last_swapped_timestamp_seconds") == newest
