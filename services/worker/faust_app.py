"""Assemble the Faust app: one topic, table and generic agent per process, plus deadlines.

:func:`create_app` takes the processes it runs, so tests can pass other definitions. What
it assembles lives beside it: the table adapter (:mod:`~services.worker.faust_table`), the
Kafka ports (:mod:`~services.worker.kafka_ports`), the agents (:mod:`~services.worker.agents`),
the resume at stored positions (:mod:`~services.worker.resume`), the deadline timer
(:mod:`~services.worker.deadline_timer`), the web pages
(:mod:`~services.worker.metrics_pages`); every use of Faust's internals is in
:mod:`~services.worker.faust_seam`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import faust
from opentelemetry.trace import Tracer

from runtime import tracing
from runtime.kafka_security import faust_credentials
from runtime.partitioner import partition_for
from runtime.settings import Settings
from runtime.topics import (
    DEAD_LETTERS,
    LEGACY_INGEST,
    legacy_table_topics,
    legacy_transaction_topic,
    table_name,
)
from sagas.catalog import LEGACY_TX
from sagas.machinery.process import Process
from sagas.machinery.retirement import Retirement
from services.worker import delivery, faust_seam
from services.worker.agents import Batched, register_agent
from services.worker.deadline_timer import register_deadline_timer
from services.worker.deadline_timer import send_ticks as _send_ticks
from services.worker.deadlines import HORIZON, DeadlineIndex
from services.worker.faust_table import FaustTable
from services.worker.fetch_planner import use_fast_fetch_planner
from services.worker.fetch_sessions import use_fetch_sessions
from services.worker.ingest import DebeziumIngest
from services.worker.kafka_ports import KafkaPorts
from services.worker.membership import TICK_S, Membership
from services.worker.metrics import Metrics
from services.worker.metrics_pages import register_metrics
from services.worker.orphan_promotion import promote_orphans_past_capacity
from services.worker.resume import reseek_overdue_gaps, resume_from_stored_positions
from services.worker.rocksdb_budget import BUDGET_OPTION, MemoryBudget, store_url
from services.worker.runner import ProcessRunner
from services.worker.stale_stores import MAX_AGE, Currency, judge_stores_on_assignment
from services.worker.stalls import register_stall_check
from services.worker.tracing import StepTracing

__all__ = ["MIB", "FaustTable", "_send_ticks", "create_app"]
"""``FaustTable`` and ``_send_ticks`` are kept here for the code that imports them from here."""

MIB = 1024 * 1024

faust_seam.make_producers_idempotent()
# Records reach the agents without four tasks each (services/worker/delivery.py).
delivery.install()


def create_app(
    settings: Settings,
    processes: Sequence[Process[Any]],
    metrics: Metrics | None = None,
    currency: Currency | None = None,
) -> tuple[faust.App, list[ProcessRunner]]:
    """``currency``: the local stores judged at the start (services/worker/stale_stores.py);
    without it every store found on disk is recovered from its changelog."""
    faust_seam.require_tested_faust()
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=faust_credentials(settings),
        store="rocksdb://" if settings.store == "rocksdb" else "memory://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        processing_guarantee="at_least_once",
        producer_acks=-1,
        producer_linger=settings.producer_linger_ms / 1000,
        producer_partitioner=partition_for,  # Kafka's, with each key's hash remembered
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        web_port=settings.worker_web_port,
        # web_bind is the address the server listens on (Faust's default: every
        # interface); web_host only names it in URLs. /metrics has no key, so both follow
        # the setting, loopback unless told otherwise.
        web_bind=settings.worker_web_host,
        web_host=settings.worker_web_host,
        # Faust's own views are off: /table/<table>/<key>/ served any saga's or participant's
        # stored state, /router/ the cluster's layout, /graph/ and / its internals, to
        # whoever reaches the port (it has no key). It serves Sagaline's pages only.
        web_tables_enabled=False,
        web_router_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        web_metrics_enabled=False,
        table_cleanup_interval=3600.0,
        broker_session_timeout=settings.session_timeout_s,
        # A survivor learns of a rebalance from a heartbeat's answer, and the group waits
        # for the last member to rejoin: a worker's death costs the session timeout plus up
        # to two heartbeat intervals (the soak's SIGKILL, BENCHMARKS.md). A tenth of the
        # session (1 s at the default) keeps that small for one request a second each.
        broker_heartbeat_interval=settings.session_timeout_s / 10,
        table_standby_replicas=settings.table_standby_replicas,
    )
    faust_seam.drop_faust_views(app)
    if not settings.consumer_thread:
        faust_seam.consumer_on_the_app_loop(app)
    if settings.fetch_sessions:
        use_fetch_sessions()  # planned by fetch_planner.plan_actions, as without them
    else:
        use_fast_fetch_planner()
    # A dead worker's partitions go to their standbys' workers, past Faust's balance cap.
    promote_orphans_past_capacity()
    # A standby's first changelog fetch survives the recovery's last resume of flow.
    faust_seam.keep_standby_changelog_on_resume(app)
    # A standby added while a recovery finishes is sought from its start, not crashed on.
    faust_seam.seek_unread_changelogs_from_the_start()
    # A recovery step that ends as a rebalance lands is redone by the new recovery.
    faust_seam.no_recovery_step_past_a_rebalance()
    # aiokafka never drains every partition because Faust's set of active ones is empty.
    faust_seam.fetch_only_active_partitions()
    # A changelog record reaches the recovery only from its partition's current read.
    faust_seam.read_changelogs_without_gaps()
    faust_seam.report_dropped_records()
    # Its checks are wrong for the worker; services/worker/stalls.py is the worker's own.
    faust_seam.quiet_faust_livelock_detector()
    # A leader that assigned without a topic's metadata asks for it until it has it.
    faust_seam.rejoin_when_topics_appear(app)
    if settings.store == "rocksdb":  # a store that may have missed tombstones is not reopened
        judge_stores_on_assignment(app, currency or Currency(MAX_AGE, {}))
    metrics = metrics or Metrics()
    # One budget for every table partition this process opens (rocksdb_budget).
    budget = MemoryBudget(settings.rocksdb_memory_mb * MIB) if settings.store == "rocksdb" else None
    # Off (the default), no tracer: the runners build no span, context nor header.
    tracer = tracing.configure(settings.tracing, "worker")
    membership = _membership(app, settings)
    runners = [
        _register(app, settings, budget, process, metrics, membership, tracer)
        for process in processes
    ]
    consumers: list[Batched] = [*runners]
    if settings.cdc_enabled:
        consumers.append(_register_ingest(app, settings, budget, metrics, membership, tracer))
    faust_seam.deliver_every_input_record(app, [t for c in consumers for t in c.input_topics])
    resume_from_stored_positions(app, consumers, settings.start_without_position)
    reseek_overdue_gaps(app, consumers)
    register_deadline_timer(app, settings, runners)
    register_metrics(app, settings, metrics, runners)
    register_stall_check(
        app,
        consumers,
        settings.stall_after_s,
        metrics.prom.stalled.set,
        judge_unstarted=settings.start_without_position == "earliest",
    )
    return app, runners


async def store_before_stop(runners: Sequence[ProcessRunner]) -> None:
    """What every runner holds pending, stored before Faust stops (ProcessRunner.stopping)."""
    await asyncio.gather(*(runner.stopping() for runner in runners))


def _membership(app: faust.App, settings: Settings) -> Membership:
    """One guard for every writer of the process (services/worker/membership.py): its ticker
    turns on the event loop, it asks the consumer whether the group still knows it, and
    each completed assignment ends a doubt."""
    membership = Membership(
        settings.session_timeout_s,
        rebalancing=lambda: faust_seam.changing_hands(app),
        member=lambda: faust_seam.group_member(app),
    )

    @app.timer(interval=TICK_S)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        membership.tick()

    async def assigned() -> None:
        membership.assigned()

    faust_seam.after_seek_to_committed(app, assigned)
    faust_seam.guard_produce_requests(app, membership.confirm_before_transmit)
    return membership


def _register(
    app: faust.App,
    settings: Settings,
    budget: MemoryBudget | None,
    process: Process[Any],
    metrics: Metrics,
    membership: Membership,
    tracer: Tracer | None = None,
) -> ProcessRunner:
    topic = app.topic(settings.topic(process.name), key_type=bytes, value_type=bytes)
    table = _table(app, settings, budget, process.name, settings.partitions)
    ports = KafkaPorts(app, settings, membership)
    runner = ProcessRunner(
        process=process,
        table=FaustTable(table, ports.send_to, membership.confirm_after_write),
        send=ports.send,
        topic_for=settings.topic,
        dead_letter_topic=settings.topic(DEAD_LETTERS),
        metrics=metrics,
        seen_window=settings.seen_window,
        store_every_s=settings.store_every_ms / 1000,
        seek=ports.seek,
        first_offset=ports.probe.first_at_or_after,
        max_message_bytes=settings.max_message_bytes,
        deadletter_inline_max_bytes=settings.deadletter_inline_max_bytes,
        state_cache_keys=settings.state_cache_keys,
        tracing=None if tracer is None else StepTracing(tracer, process),
        deadlines=DeadlineIndex(settings.deadline_rescan_s, horizon=HORIZON),
        retirement=Retirement(
            record=timedelta(seconds=settings.retire_after_s),
            marker=timedelta(seconds=settings.retired_marker_s),
        ),
    )
    register_agent(app, settings, topic, process.name, runner)
    runner.faust_table = table  # type: ignore[attr-defined]
    return runner


def _register_ingest(
    app: faust.App,
    settings: Settings,
    budget: MemoryBudget | None,
    metrics: Metrics,
    membership: Membership,
    tracer: Tracer | None = None,
) -> DebeziumIngest:
    """The Debezium ingest edge (SAGALINE_CDC_ENABLED): one agent over Debezium's four legacy
    topics, its read positions in a table partitioned like them (see
    :mod:`services.worker.ingest`)."""
    names = [*legacy_table_topics(settings), legacy_transaction_topic(settings)]
    topic = app.topic(*names, key_type=bytes, value_type=bytes)
    table = _table(app, settings, budget, LEGACY_INGEST, settings.cdc_topic_partitions)
    ports = KafkaPorts(app, settings, membership)
    ingest = DebeziumIngest(
        name=LEGACY_INGEST,
        table_topics=tuple(legacy_table_topics(settings)),
        transaction_topic=legacy_transaction_topic(settings),
        correlator_topic=settings.topic(LEGACY_TX),
        table=FaustTable(table, ports.send_to, membership.confirm_after_write),
        send=ports.send,
        dead_letter_topic=settings.topic(DEAD_LETTERS),
        metrics=metrics,
        seek=ports.seek,
        first_offset=ports.probe.first_at_or_after,
        deadletter_inline_max_bytes=settings.deadletter_inline_max_bytes,
        tracer=tracer,
    )
    register_agent(app, settings, topic, LEGACY_INGEST, ingest)
    return ingest


def _table(
    app: faust.App, settings: Settings, budget: MemoryBudget | None, channel: str, partitions: int
) -> Any:
    name = table_name(channel)
    return app.Table(
        name,
        partitions=partitions,
        key_type=bytes,
        value_type=bytes,
        store=store_url(name) if budget is not None else None,
        options=_rocksdb_options(settings, budget) if budget is not None else None,
    )


def _rocksdb_options(settings: Settings, budget: MemoryBudget) -> dict[str, Any]:
    """Faust opens one RocksDB per table partition, by default with 64 MiB memtables (three
    of them) and a 2 GiB cache each: bounds far above a small worker. State lives on disk;
    every database shares ``budget`` (:mod:`services.worker.rocksdb_budget`), and its own
    memtables stay small so that one busy partition does not take the whole budget."""
    return {
        "write_buffer_size": settings.rocksdb_write_buffer_mb * MIB,
        "max_write_buffer_number": 2,
        BUDGET_OPTION: budget,
    }
