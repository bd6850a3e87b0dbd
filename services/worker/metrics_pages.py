"""The worker's own web pages: its metrics as JSON and for Prometheus (with each owned input
partition's lag), and a periodic metrics log line."""

from __future__ import annotations

import logging
from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime.settings import Settings
from services.worker.faust_seam import changing_hands
from services.worker.memory import open_rocksdbs
from services.worker.metrics import Metrics
from services.worker.runner import ProcessRunner

log = logging.getLogger(__name__)


def register_metrics(
    app: faust.App, settings: Settings, metrics: Metrics, runners: list[ProcessRunner]
) -> None:
    @app.page("/sagaline/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        return web.json(metrics.snapshot())

    @app.page("/metrics")
    async def prometheus_view(web: Any, request: Any) -> Any:
        try:
            await _measure_lag(app, metrics, runners)
        except Exception as exc:  # a scrape during a rebalance: serve the rest
            log.debug("lag not measured: %s", exc)
        if settings.worker_memory_metrics:
            tables = [runner.faust_table for runner in runners]  # type: ignore[attr-defined]
            metrics.prom.measure_memory(open_rocksdbs(tables))
        # aiohttp refuses a content_type with a charset: the header is set whole instead.
        return web.bytes(
            generate_latest(metrics.prom.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    @app.timer(interval=settings.metrics_log_s)  # type: ignore[untyped-decorator]
    async def log_metrics() -> None:
        log.info("metrics %s", metrics.snapshot())


async def _measure_lag(app: faust.App, metrics: Metrics, runners: list[ProcessRunner]) -> None:
    """Per owned input partition: its end offset less the position stored for it (what is
    left to process; a partition with no stored position yet counts from offset 0)."""
    if changing_hands(app):
        # Mid-rebalance the assignment is the new one, whose stores are judged and opened
        # by the rebalance itself (services/worker/stale_stores.py): keep the last figures.
        return
    by_topic = {runner.topic: runner for runner in runners}
    owned = [tp for tp in app.consumer.assignment() if tp.topic in by_topic]
    ends = await app.consumer.highwaters(*owned) if owned else {}
    metrics.prom.lag.clear()  # partitions handed to another worker drop out
    for tp in owned:
        stored = by_topic[tp.topic].table.load_position(tp.topic, tp.partition) or 0
        end = ends.get(tp)
        if end is not None:
            metrics.prom.lag.labels(tp.topic, str(tp.partition)).set(max(end - stored, 0))
