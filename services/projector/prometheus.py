"""The projector's Prometheus metrics: events applied, how far behind, what is held.

Served by a small HTTP server of prometheus-client's own (a thread: a scrape is answered
even while a batch's transaction holds the event loop's attention) at
``SAGALINE_PROJECTOR_METRICS_HOST``:``SAGALINE_PROJECTOR_METRICS_PORT``, path ``/metrics``.
Labels are a result from a fixed list, the topic and a partition; never an id.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

log = logging.getLogger(__name__)

RESULTS = ("applied", "duplicate", "dead_lettered", "unknown_type")


class ProjectorPrometheus:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "sagaline_projector_events",
            "Domain events by result: applied, duplicate (skipped by sequence), dead_lettered "
            "(malformed or refused by the database), unknown_type (skipped, also dead-lettered)",
            ["result"],
            registry=r,
        )
        for result in RESULTS:
            self.events.labels(result)
        self.lag = Gauge(
            "sagaline_projector_lag_records",
            "Events between a partition's end and the projector's position in it",
            ["topic", "partition"],
            registry=r,
        )
        self.held = Gauge(
            "sagaline_projector_held_events",
            "Events held behind a sequence gap, waiting for the missing ones",
            registry=r,
        )
        self.held_alerting = Gauge(
            "sagaline_projector_held_alerting_events",
            "Events held longer than SAGALINE_GAP_ALERT_S",
            registry=r,
        )

    def serve(self, host: str, port: int) -> Any:
        """Start the HTTP server (0: none). A port in use is a warning, not a failed start:
        the projection matters more than its metrics."""
        if port == 0:
            return None
        try:
            server, _thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            log.warning("cannot serve metrics on %s:%d: %s", host, port, exc)
            return None
        log.info("serving Prometheus metrics at http://%s:%d/metrics", host, port)
        return server
