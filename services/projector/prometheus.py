"""The projector's Prometheus metrics: events applied, how far behind, what is held.

Served by a small HTTP server of prometheus-client's own (a thread: a scrape is answered
even while a batch's transaction holds the event loop's attention) at
``SAGALINE_PROJECTOR_METRICS_HOST``:``SAGALINE_PROJECTOR_METRICS_PORT``, path ``/metrics``.
Labels are a result from a fixed list, the topic and a partition, a read-model table; never
an id. The last rebuild's gauges are read from the database's ``rebuild_runs`` (the Spark
job records each rebuild that swapped its models in; a failed one leaves no row), refreshed
with the projector's housekeeping, every few seconds.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from readside.queries import RebuildHistory
from runtime.gc_tuning import GcCollector

log = logging.getLogger(__name__)

RESULTS = ("applied", "duplicate", "dead_lettered", "unknown_type")
REBUILD_RESULTS = ("swapped", "failed")


class ProjectorPrometheus:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(GcCollector())
        self.events = Counter(
            "sagaline_projector_events",
            "Domain events by result: applied, duplicate (skipped by sequence), dead_lettered "
            "(malformed or refused by the database), unknown_type (skipped, also dead-lettered)",
            ["result"],
            registry=r,
        )
        for result in RESULTS:
            self.events.labels(result)
        self.batches = Counter(
            "sagaline_projector_batches",
            "Batches applied, each in one database transaction (events applied per batch: "
            "the events' rate over this one; SAGALINE_PROJECTOR_LINGER_MS)",
            registry=r,
        )
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
        self.pruned = Counter(
            "sagaline_projector_pruned_sagas",
            "Finished sagas whose rows the read side's retention deleted "
            "(SAGALINE_READ_RETENTION_S)",
            registry=r,
        )

        self.rebuild_swapped = Gauge(
            "sagaline_rebuild_last_swapped_timestamp_seconds",
            "When the last rebuild swapped its models in (Unix time; 0: none recorded)",
            registry=r,
        )
        self.rebuild_duration = Gauge(
            "sagaline_rebuild_last_duration_seconds",
            "How long the last rebuild took, from its start to its swap",
            registry=r,
        )
        self.rebuild_rows = Gauge(
            "sagaline_rebuild_last_rows",
            "Rows the last rebuild swapped into each table",
            ["table"],
            registry=r,
        )
        self.rebuild_events = Gauge(
            "sagaline_rebuild_last_events_read",
            "Events the last rebuild read from the event topic",
            registry=r,
        )

        self.rebuild_result = Gauge(
            "sagaline_rebuild_last_result",
            "1 for the last rebuild attempt's result (swapped, or failed: see rebuild_failures), "
            "0 for the other; both 0 while no rebuild is recorded",
            ["result"],
            registry=r,
        )
        for result in REBUILD_RESULTS:
            self.rebuild_result.labels(result).set(0)

    def show_rebuild(self, history: RebuildHistory) -> None:
        """The last swapped rebuild's numbers (zeros and no table while there is none), and
        whether the last attempt swapped or failed."""
        for result in REBUILD_RESULTS:
            self.rebuild_result.labels(result).set(1 if history.last_result == result else 0)
        run = history.swapped
        self.rebuild_rows.clear()
        if run is None:
            for gauge in (self.rebuild_swapped, self.rebuild_duration, self.rebuild_events):
                gauge.set(0)
            return
        self.rebuild_swapped.set(run.swapped_at.timestamp())
        self.rebuild_duration.set(run.duration_s)
        self.rebuild_events.set(run.events_read)
        for table, rows in run.rows.items():
            self.rebuild_rows.labels(table).set(rows)

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
