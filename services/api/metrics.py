"""The API's Prometheus metrics: requests by route template, method and status, with latency.

The route label is the template the request matched (``/orders/{order_id}``), never the
path itself, so ids never become labels; a request no route matched is ``unmatched``.
``GET /metrics`` serves them (scope ``read``: a scraper holds a read-only key).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime.gc_tuning import GcCollector

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""A client may send any method name: others are counted as ``other``."""
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ApiPrometheus:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(GcCollector())
        self.requests = Counter(
            "sagaline_api_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "sagaline_api_request_seconds",
            "Time to answer, by route template and method",
            ["route", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        # From the saga tables' changelogs, at most every SAGALINE_IN_FLIGHT_REFRESH_S
        # (services.api.inflight): every API process reads them, so sum none, take one.
        self.in_flight = Gauge(
            "sagaline_sagas_in_flight",
            "Saga instances in flight, by saga type and the version that started them",
            ["saga_type", "version"],
            registry=self.registry,
        )
        self.in_flight_read_failures = Counter(
            "sagaline_sagas_in_flight_read_failures",
            "Readings of the saga tables' changelogs that failed (the gauge kept its values)",
            registry=self.registry,
        )
        # The labelled children, looked up once: ``labels()`` takes a lock and checks its
        # arguments on every call (~5% of a POST /orders under load). Bounded: route
        # templates x METHODS x statuses.
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def count(self, route: str, method: str, status: int, seconds: float) -> None:
        counter = self._counters.get((route, method, status))
        if counter is None:
            counter = self.requests.labels(route, method, str(status))
            self._counters[(route, method, status)] = counter
        counter.inc()
        timer = self._timers.get((route, method))
        if timer is None:
            timer = self._timers[(route, method)] = self.seconds.labels(route, method)
        timer.observe(seconds)


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request once it is answered."""

    def __init__(self, app: ASGIApp, metrics: ApiPrometheus) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets when the app raises before it answers

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = _template(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.count(route, method, status, time.perf_counter() - started)


def _template(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this API process's metrics."""
    in_flight = getattr(request.app.state, "in_flight", None)
    if in_flight is not None:
        await in_flight.current()  # read again if due (in a thread), else the last reading
    registry = request.app.state.prometheus.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
