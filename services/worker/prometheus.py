"""The worker's Prometheus metrics: what its agents did, what its sagas did, how far behind.

Every label set is bounded: a process name, a saga type and an outcome from
``sagas.catalog.SAGA_TYPES``, a result from a fixed list, a topic and partition; never an
id. One registry per worker (not the library's global one), so tests can build several.

Counters are at-least-once like the records they count: a batch replayed after a crash
counts its sagas' starts and ends again (the events themselves are deduplicated).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runtime.gc_tuning import GcCollector
from sagas.catalog import SAGA_TYPES, saga_type_of
from sagas.contracts.system import Tick
from sagas.machinery.record import Record
from sagas.machinery.step import EVENTS_CHANNEL, StepResult
from sagas.messages import Envelope
from services.worker.memory import (
    PropertyDB,
    malloc_stats,
    python_allocated_blocks,
    rocksdb_memory,
)

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class WorkerPrometheus:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter(
            "sagaline_worker_records",
            "Input records by process and result (processed, duplicate, dead_lettered)",
            ["process", "result"],
            registry=r,
        )
        self.deadlines_fired = Counter(
            "sagaline_worker_deadlines_fired",
            "Durable deadlines (step timeouts, reservation expiries) fired, by process",
            ["process"],
            registry=r,
        )
        self.sagas_started = Counter(
            "sagaline_sagas_started", "Sagas started, by saga type", ["saga_type"], registry=r
        )
        self.sagas_finished = Counter(
            "sagaline_sagas_finished",
            "Sagas that reached a final status, by saga type and that status",
            ["saga_type", "outcome"],
            registry=r,
        )
        self.step_seconds = Histogram(
            "sagaline_saga_step_seconds",
            "Time from a saga's previous decision to the next one that sent something",
            ["saga_type"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.duration_seconds = Histogram(
            "sagaline_saga_duration_seconds",
            "Time from a saga's first decision to its final status",
            ["saga_type"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.lag = Gauge(
            "sagaline_worker_lag_records",
            "Records between the end of a partition and the position stored for it",
            ["topic", "partition"],
            registry=r,
        )
        self.stalled = Gauge(
            "sagaline_worker_stalled_partitions",
            "Owned input partitions with records waiting that have not moved for "
            "SAGALINE_STALL_AFTER_S (services/worker/stalls.py)",
            registry=r,
        )
        r.register(GcCollector())
        for saga in SAGA_TYPES:  # every series exists from the start, at zero
            self.sagas_started.labels(saga.entity_type)
            for outcome in sorted(saga.statuses.final):
                self.sagas_finished.labels(saga.entity_type, outcome)

    def measure_memory(self, dbs: list[PropertyDB]) -> None:
        """Set the memory gauges (``services.worker.memory``) from ``dbs``, the RocksDB
        databases open now. The gauges exist from the first call on: a worker that does not
        measure (the default) does not export zeros that would read as measurements."""
        if not hasattr(self, "rocksdb_memory"):
            r = self.registry
            self.rocksdb_memory = Gauge(
                "sagaline_worker_rocksdb_memory_bytes",
                "RocksDB's own memory accounting over the open table partitions, by kind "
                "(memtables, table_readers, block_cache)",
                ["kind"],
                registry=r,
            )
            self.rocksdb_sst = Gauge(
                "sagaline_worker_rocksdb_sst_bytes",
                "Size of the SST files of the open table partitions (on disk, not memory)",
                registry=r,
            )
            self.rocksdb_open = Gauge(
                "sagaline_worker_rocksdb_open_databases",
                "RocksDB databases open (one per table and assigned partition)",
                registry=r,
            )
            self.python_blocks = Gauge(
                "sagaline_worker_python_allocated_blocks",
                "Live blocks of Python's object allocator "
                "(sys.getallocatedblocks(); a count, not bytes)",
                registry=r,
            )
            self.malloc_bytes = Gauge(
                "sagaline_worker_malloc_bytes",
                "glibc malloc over the whole process: bytes in use and bytes held free (mallinfo2)",
                ["state"],
                registry=r,
            )
        by_kind = rocksdb_memory(dbs)
        self.rocksdb_sst.set(by_kind.pop("sst_files"))
        for kind, value in by_kind.items():
            self.rocksdb_memory.labels(kind).set(value)
        self.rocksdb_open.set(len(dbs))
        self.python_blocks.set(python_allocated_blocks())
        malloc = malloc_stats()
        if malloc is not None:
            self.malloc_bytes.labels("in_use").set(malloc.in_use)
            self.malloc_bytes.labels("free").set(malloc.free)

    def count_batch(self, process: str, processed: int, duplicates: int, dead: int) -> None:
        """What a stored batch did with its records (a record whose decision was too large
        to send counts as dead-lettered, not processed)."""
        for result, n in (
            ("processed", processed),
            ("duplicate", duplicates),
            ("dead_lettered", dead),
        ):
            self.records.labels(process, result).inc(n)

    def observe(
        self,
        process: str,
        entity_type: str,
        envelope: Envelope,
        before: Record[Any] | None,
        result: StepResult,
        now: datetime,
    ) -> None:
        """What one applied decision says about deadlines and sagas."""
        if envelope.type == Tick.TYPE and before is not None:
            fired = sum(1 for when in before.deadlines.values() if when <= now)
            if fired:
                self.deadlines_fired.labels(process).inc(fired)
        saga = saga_type_of(entity_type)
        if saga is None or not result.outbound:
            return
        if before is not None and before.stepped_at is not None:
            self.step_seconds.labels(saga.entity_type).observe(
                (now - before.stepped_at).total_seconds()
            )
        for out in result.outbound:
            fact = out.envelope
            if out.channel != EVENTS_CHANNEL or fact.entity_type != saga.entity_type:
                continue
            if fact.sequence == 1:
                self.sagas_started.labels(saga.entity_type).inc()
            status = fact.payload.get("status")
            if fact.type == saga.statuses.event.TYPE and saga.is_final(status):
                self.sagas_finished.labels(saga.entity_type, status).inc()
                started = result.record.started_at or now
                self.duration_seconds.labels(saga.entity_type).observe(
                    (now - started).total_seconds()
                )
