"""Assemble the Faust app: one topic, table and generic agent per process, plus deadlines.

:func:`create_app` takes the processes it runs, so tests can pass other definitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, Protocol

import faust
import rocksdict
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import RecordMetadata
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as RocksDBStore
from faust.streams import _current_event
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime.kafka_security import aiokafka_options, faust_credentials
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
from sagas.contracts.system import Tick
from sagas.ids import derive_id
from sagas.machinery.history import is_chunk_key
from sagas.machinery.process import Process
from sagas.machinery.retirement import Retirement
from sagas.messages import Envelope
from services.worker import delivery
from services.worker.batching import take_queued
from services.worker.deadlines import HORIZON, DeadlineIndex, indexed_key
from services.worker.ingest import DebeziumIngest
from services.worker.memory import open_rocksdbs
from services.worker.metrics import Metrics
from services.worker.positions import InputPositions, position_key
from services.worker.rocksdb_budget import BUDGET_OPTION, MemoryBudget, store_url
from services.worker.runner import Incoming, Positions, ProcessRunner, StateWrite, Table

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
MIB = 1024 * 1024


def _idempotent_settings(self: Any) -> dict[str, Any]:
    # Faust enables idempotence only inside transactions; we want it always, so a producer
    # retry can neither duplicate nor reorder records of one partition.
    return {"acks": "all", "enable_idempotence": True}


faust_aiokafka.Producer._settings_extra = _idempotent_settings  # type: ignore[method-assign]
# Records reach the agents without four tasks each (services/worker/delivery.py).
delivery.install()


@contextmanager
def _in_partition(partition: int) -> Iterator[None]:
    """Faust's stores take the partition of a key from the current event: make it one of
    ``partition``."""
    origin = _PartitionOrigin(partition)
    token = _current_event.set(weakref.ref(origin))  # type: ignore[arg-type]
    try:
        yield
    finally:
        _current_event.reset(token)


class _PartitionOrigin:
    """Stands in for an event of ``partition``: Faust's stores pick the partition from it."""

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


SendTo = Callable[[str, bytes, bytes | None, int], Awaitable[Awaitable[RecordMetadata]]]
"""Queue a record (None: a tombstone) for one partition of a topic; the awaited result is
its delivery future."""


class FaustTable:
    """A Faust table seen through the runner's :class:`~services.worker.runner.Table` port.

    Writes do not go through Faust's ``table[key] = value``: that applies the value to the
    local RocksDB at once and sends the changelog record later, so a SIGKILL in between
    leaves a local store AHEAD of its changelog. Faust then recovers by re-applying the
    changelog records after the offset it has persisted locally, which puts the keys those
    records touch back to older values while other keys keep newer ones: a saga found at an
    older state than the position stored for its partition (RELIABILITY.md, run
    021116af19). Here the changelog comes first: a batch's records are sent and
    acknowledged, then applied locally, then the changelog offset they reached is persisted
    (the local store is never ahead of the changelog, and re-applying any suffix of the
    changelog over it gives the changelog's own state).
    """

    def __init__(self, table: Any, send_to: SendTo) -> None:
        self.table = table
        self._send_to = send_to

    def load(self, key: str, partition: int) -> bytes | None:
        with _in_partition(partition):
            value: bytes | None = self.table.data.get(key.encode())
            return value

    def load_position(self, topic: str, partition: int) -> int | None:
        raw = self.load(position_key(topic, partition), partition)
        return None if raw is None else int(raw)

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        writes = [(s.key.encode(), s.value, s.partition) for s in states]
        writes += [
            (position_key(topic, partition).encode(), str(offset).encode(), partition)
            for (topic, partition), offset in positions.items()
        ]
        if not writes:
            return
        changelog = self.table.changelog_topic.get_topic_name()
        futures = [await self._send_to(changelog, k, v, p) for k, v, p in writes]
        acked = await asyncio.gather(*futures)
        store = self.table.data
        _store_locally(store, writes)
        reached: dict[int, int] = {}
        for meta in acked:
            reached[meta.partition] = max(meta.offset, reached.get(meta.partition, -1))
        for partition, offset in reached.items():
            store.set_persisted_offset(TP(changelog, partition), offset)

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every key's state (positions, deadline index entries and history chunks left
        out). Batches may write while the caller iterates (the deadline rebuild yields to
        them): RocksDB iterators read a snapshot, but a dict refuses to change size under an
        iterator, so the memory store's items are copied first."""
        store = self.table.data
        everything = list(store.items()) if isinstance(store, MemoryStore) else store.items()
        for key, value in everything:
            text = key.decode()
            if not text.startswith(_TABLE_OWN) and not is_chunk_key(text):
                yield text, value

    # --- what the deadline index reads (services/worker/deadlines.py) ----------------------
    # Faust's RocksDB store keeps one database per partition (``_dbs``, those of the
    # partitions this worker holds, by partition); rocksdict's ``keys(from_key=...)`` reads
    # a key range in order. The memory store (tests only) is one dict for every partition:
    # it reads as partition 0 and its entries are never missing.

    def held_partitions(self) -> Sequence[int]:
        store = self.table.data
        if _rocksdict(store):
            return sorted(store._dbs)
        return [0]

    def index_keys(self, partition: int, start: str, stop: str) -> Iterator[str]:
        store = self.table.data
        if not _rocksdict(store):
            yield from sorted(k.decode() for k in list(store) if start <= k.decode() < stop)
            return
        db = store._dbs.get(partition)
        if db is None:
            return
        end = stop.encode()
        for key in db.keys(from_key=start.encode()):
            if key >= end:
                return
            yield key.decode()

    def needs_index(self, partition: int) -> bool:
        if not _rocksdict(self.table.data):
            return False
        return self.load(indexed_key(partition), partition) is None

    def records(self, partition: int) -> Iterator[tuple[str, bytes]]:
        store = self.table.data
        db = store._dbs.get(partition) if _rocksdict(store) else None
        if db is None:
            return
        for key, value in db.items():
            text = key.decode(errors="replace")
            own = key == store.offset_key or text.startswith(_TABLE_OWN)
            if not own and not is_chunk_key(text):
                yield text, value


_TABLE_OWN = "\x00"
"""The first character of every key the worker keeps beside the records (input positions,
deadline index entries and flags): no envelope key starts with it."""


def _rocksdict(store: Any) -> bool:
    return isinstance(store, RocksDBStore) and bool(store.use_rocksdict)


def _store_locally(store: Any, writes: Sequence[tuple[bytes, bytes | None, int]]) -> None:
    """Apply acknowledged writes to the local store, in order. RocksDB takes them as one
    write batch per partition, as Faust applies its changelog in recovery: a batch's states
    and positions land together, and each entry costs ~2 us instead of ~14 through Faust's
    per-key path (its event lookup and key index are for reads outside a partition, which
    the worker never does: :meth:`FaustTable.load` names the partition)."""
    if isinstance(store, RocksDBStore) and store.use_rocksdict:
        batches: dict[int, Any] = {}
        for key, value, partition in writes:
            if (batch := batches.get(partition)) is None:
                batch = batches[partition] = rocksdict.WriteBatch(raw_mode=True)
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        for partition, batch in batches.items():
            store._db_for_partition(partition).write(batch)
        return
    for key, value, partition in writes:
        with _in_partition(partition):
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value


def create_app(
    settings: Settings, processes: Sequence[Process[Any]], metrics: Metrics | None = None
) -> tuple[faust.App, list[ProcessRunner]]:
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
        broker_heartbeat_interval=settings.session_timeout_s / 4,
    )
    _without_faust_views(app)
    metrics = metrics or Metrics()
    # One budget for every table partition this process opens (rocksdb_budget).
    budget = MemoryBudget(settings.rocksdb_memory_mb * MIB) if settings.store == "rocksdb" else None
    runners = [_register(app, settings, budget, process, metrics) for process in processes]
    consumers: list[Batched] = [*runners]
    if settings.cdc_enabled:
        consumers.append(_register_ingest(app, settings, budget, metrics))
    _resume_from_stored_positions(app, consumers, settings.start_without_position)
    _register_deadline_timer(app, settings, runners)
    _register_metrics(app, settings, metrics, runners)
    return app, runners


def _without_faust_views(app: faust.App) -> None:
    """Drop what Faust would still mount with its views' settings off: its "production
    index" at / (no setting turns it off), and any view a later Faust adds by default."""
    blueprints = app.web.blueprints
    blueprints._enabled = [
        (prefix, bp)
        for prefix, bp in blueprints._enabled
        if not (isinstance(bp, str) and bp.startswith("faust."))
    ]


def _register(
    app: faust.App,
    settings: Settings,
    budget: MemoryBudget | None,
    process: Process[Any],
    metrics: Metrics,
) -> ProcessRunner:
    topic = app.topic(settings.topic(process.name), key_type=bytes, value_type=bytes)
    table = _table(app, settings, budget, process.name, settings.partitions)
    ports = _Ports(app, settings)
    runner = ProcessRunner(
        process=process,
        table=FaustTable(table, ports.send_to),
        send=ports.send,
        topic_for=settings.topic,
        dead_letter_topic=settings.topic(DEAD_LETTERS),
        metrics=metrics,
        seen_window=settings.seen_window,
        seek=ports.seek,
        first_offset=ports.probe.first_at_or_after,
        max_message_bytes=settings.max_message_bytes,
        deadletter_inline_max_bytes=settings.deadletter_inline_max_bytes,
        state_cache_keys=settings.state_cache_keys,
        deadlines=DeadlineIndex(settings.deadline_rescan_s, horizon=HORIZON),
        retirement=Retirement(
            record=timedelta(seconds=settings.retire_after_s),
            marker=timedelta(seconds=settings.retired_marker_s),
        ),
    )
    _agent(app, settings, topic, process.name, runner)
    runner.faust_table = table  # type: ignore[attr-defined]
    return runner


def _register_ingest(
    app: faust.App, settings: Settings, budget: MemoryBudget | None, metrics: Metrics
) -> DebeziumIngest:
    """The Debezium ingest edge (SAGALINE_CDC_ENABLED): one agent over Debezium's four legacy
    topics, its read positions in a table partitioned like them (see
    :mod:`services.worker.ingest`)."""
    names = [*legacy_table_topics(settings), legacy_transaction_topic(settings)]
    topic = app.topic(*names, key_type=bytes, value_type=bytes)
    table = _table(app, settings, budget, LEGACY_INGEST, settings.cdc_topic_partitions)
    ports = _Ports(app, settings)
    ingest = DebeziumIngest(
        name=LEGACY_INGEST,
        table_topics=tuple(legacy_table_topics(settings)),
        transaction_topic=legacy_transaction_topic(settings),
        correlator_topic=settings.topic(LEGACY_TX),
        table=FaustTable(table, ports.send_to),
        send=ports.send,
        dead_letter_topic=settings.topic(DEAD_LETTERS),
        metrics=metrics,
        seek=ports.seek,
        first_offset=ports.probe.first_at_or_after,
        deadletter_inline_max_bytes=settings.deadletter_inline_max_bytes,
    )
    _agent(app, settings, topic, LEGACY_INGEST, ingest)
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


class _Ports:
    """What a batch consumer reaches Kafka through: the app's producer and consumer, and a
    probe of its own for seeks over gaps."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self.app = app
        self.probe = OffsetProbe(settings)
        app.on_before_shutdown.connect(self.probe.close_on_signal)

    async def send(self, topic_name: str, key: bytes, value: bytes) -> Any:
        return await self.app.producer.send(topic_name, key, value, None, None, None)

    async def send_to(
        self, topic_name: str, key: bytes, value: bytes | None, partition: int
    ) -> Any:
        return await self.app.producer.send(topic_name, key, value, partition, None, None)

    async def seek(self, topic_name: str, partition: int, offset: int) -> None:
        # seek_wait, not seek: Faust's consumer.seek calls aiokafka's seek from this thread
        # while aiokafka's own loop runs in the consumer thread, mid-fetch most of the time.
        # Once in a CI run that seek back over a gap never took: the partition's expected
        # record was never delivered again, each re-seek ignored alike (RELIABILITY.md).
        # seek_wait runs the seek on the consumer's thread and waits for the position.
        await self.app.consumer.seek_wait({TP(topic_name, partition): offset})


def _agent(app: faust.App, settings: Settings, topic: Any, name: str, consumer: Batched) -> None:
    """One agent feeding ``consumer`` batches of ``topic``'s records until each is done."""
    linger = settings.batch_within_ms / 1000

    async def agent(stream: Any) -> None:
        async for events in take_queued(stream, settings.batch_size, linger):
            batch = [
                Incoming(
                    topic=e.message.topic,
                    partition=e.message.partition,
                    offset=e.message.offset,
                    key=e.key,
                    value=e.value,
                    timestamp=e.message.timestamp,
                )
                for e in events
            ]
            await _handle_until_done(app, consumer, batch)

    app.agent(topic, name=name)(agent)


class OffsetProbe:
    """Asks the broker where records really are, when a seek back over a gap must know
    whether the offsets it misses exist (retention and transaction markers leave holes).
    A consumer of its own, outside the group, started on first use (gaps are rare)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._consumer: AIOKafkaConsumer | None = None

    async def first_at_or_after(self, topic: str, partition: int, offset: int) -> int | None:
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                **aiokafka_options(self._settings),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=10_000,
            )
            await self._consumer.start()
        tp = TopicPartition(topic, partition)
        first: int = (await self._consumer.beginning_offsets([tp]))[tp]
        if offset < first:
            return first  # deleted by retention
        self._consumer.assign([tp])
        self._consumer.seek(tp, offset)
        found = await self._consumer.getmany(tp, timeout_ms=3_000, max_records=1)
        records = found.get(tp, [])
        return int(records[0].offset) if records else None

    async def close_on_signal(self, *args: Any, **kwargs: Any) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None


class Batched(Protocol):
    """What consumes positioned input in batches: a process runner or an ingest edge."""

    metrics: Metrics
    table: Table
    positions: InputPositions

    @property
    def name(self) -> str: ...

    @property
    def input_topics(self) -> tuple[str, ...]: ...

    async def handle_batch(self, batch: Sequence[Incoming]) -> None: ...


async def _handle_until_done(app: faust.App, runner: Batched, batch: list[Incoming]) -> None:
    """Retry a failed batch (broker down, send timed out) with capped backoff until it is
    done: Faust acks a batch's events whatever happens, so giving up here would skip them.
    Records of partitions this worker no longer owns are left to their new owner, which
    resumes from the position stored in the table."""
    backoff = RETRY_FIRST_S
    while batch:
        try:
            await runner.handle_batch(batch)
            return
        except Exception as exc:
            runner.metrics.inc(runner.name, "batch_retries")
            log.warning(
                "%s: a batch of %d record(s) failed (%s: %s); retrying in %.1f s",
                runner.name,
                len(batch),
                type(exc).__name__,
                exc,
                backoff,
            )
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, RETRY_MAX_S)
        owned = app.consumer.assignment()
        batch = [r for r in batch if TP(r.topic, r.partition) in owned]


def _resume_from_stored_positions(
    app: faust.App, runners: Sequence[Batched], without_position: str
) -> None:
    """After every assignment Faust seeks each partition to its committed offset, once the
    tables are recovered; then seek the process topics to the positions stored in the
    tables instead, and make the runners read their positions afresh.

    A partition with no stored position has had no batch stored, ever: it starts at its
    earliest record (``without_position="earliest"``), since a committed offset there
    would be one nobody can vouch for. ``"committed"`` keeps Faust's seek: for the first
    start after upgrading from a version that stored no positions."""
    consumer = app.consumer
    seek_to_committed = consumer.perform_seek

    async def perform_seek() -> None:
        await seek_to_committed()
        for runner in runners:
            runner.positions.forget()
            if isinstance(runner, ProcessRunner):
                # Tables were just recovered: what another worker wrote meanwhile is in them.
                runner.states.clear()
        by_topic = {topic: runner for runner in runners for topic in runner.input_topics}
        for tp in consumer.assignment():
            owner = by_topic.get(tp.topic)
            if owner is None:
                continue
            stored = owner.table.load_position(*tp)
            if stored is not None:
                await consumer.seek(tp, stored)
                log.info("%s[%d]: resuming at the stored position %d", *tp, stored)
            elif without_position == "earliest":
                # Offset 0 is out of range once retention has deleted it: the consumer's
                # auto_offset_reset (earliest) then moves to the first record there is.
                await consumer.seek(tp, 0)
                log.info("%s[%d]: no stored position; starting at the earliest record", *tp)

    consumer.perform_seek = perform_seek  # type: ignore[method-assign]

    async def drop_revoked(*args: Any, **kwargs: Any) -> None:
        revoked: set[TP] = set(args[1])  # called as (sender, revoked)
        for runner in runners:
            if isinstance(runner, ProcessRunner):
                runner.states.drop_partitions(
                    t.partition for t in revoked if t.topic == runner.topic
                )

    app.on_partitions_revoked.connect(drop_revoked)


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


def _register_deadline_timer(
    app: faust.App, settings: Settings, runners: list[ProcessRunner]
) -> None:
    async def mark_stale(*args: Any, **kwargs: Any) -> None:
        for runner in runners:
            runner.deadlines.stale = True

    app.on_rebalance_complete.connect(mark_stale)

    @app.timer(interval=settings.deadline_poll_ms / 1000)  # type: ignore[untyped-decorator]
    async def fire_deadlines() -> None:
        def changing_hands() -> bool:
            return bool(app.rebalancing or app.in_recovery)

        if changing_hands():
            return  # the index is rebuilt once this worker's tables are recovered
        for runner in runners:
            try:
                if runner.deadlines.needs_rebuild(app.loop.time()):
                    await _rebuild(runner, app.loop.time(), changing_hands)
                elif runner.deadlines.needs_extension(datetime.now(UTC)):
                    await runner.extend_deadlines(changing_hands)
                if changing_hands():
                    return
                await _send_ticks(app, settings.topic(runner.process.name), runner)
            except Exception:
                # An exception out of a timer ends it: no deadline would fire again.
                log.exception("%s: deadlines failed; trying again at the next poll", runner.name)


async def _rebuild(runner: ProcessRunner, now: float, interrupted: Callable[[], bool]) -> None:
    started = time.perf_counter()
    done = await runner.rebuild_deadlines(now, interrupted)
    log.info(
        "%s: %s: %d keys with deadlines due within %s; %d index entries read (and %d records "
        "read, %d decoded, to index a partition written before entries), in %.2f s",
        runner.name,
        "deadline index rebuilt" if done else "a rebalance interrupted the deadline rebuild",
        len(runner.deadlines),
        runner.deadlines.horizon,
        runner.last_entries_read,
        *runner.last_deadline_scan,
        time.perf_counter() - started,
    )


async def _send_ticks(app: faust.App, topic: str, runner: ProcessRunner) -> None:
    """A tick per due key, each acknowledged; a key whose tick was not is kept due (its
    deadline would otherwise wait for the next rebuild: services/worker/deadlines.py)."""
    now = datetime.now(UTC)
    due = runner.deadlines.pop_due(now)
    sent: list[tuple[str, datetime, Awaitable[Any]]] = []
    try:
        for key, when in due:
            future = await app.producer.send(topic, key.encode(), _tick(key, now), None, None, None)
            sent.append((key, when, future))
    finally:
        for key, when in due[len(sent) :]:
            runner.deadlines.retry(key, when)
    results = await asyncio.gather(*(f for _, _, f in sent), return_exceptions=True)
    failed = [
        (key, when)
        for (key, when, _), r in zip(sent, results, strict=True)
        if isinstance(r, BaseException)
    ]
    for key, when in failed:
        runner.deadlines.retry(key, when)
    if failed:
        log.warning("%s: %d tick(s) not delivered; they are sent again", runner.name, len(failed))


def _tick(key: str, now: datetime) -> bytes:
    tick = Envelope.wrap(
        Tick(), message_id=derive_id(key, f"tick@{now.isoformat()}"), key=key, occurred_at=now
    )
    return tick.encode()


def _register_metrics(
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
    by_topic = {runner.topic: runner for runner in runners}
    owned = [tp for tp in app.consumer.assignment() if tp.topic in by_topic]
    ends = await app.consumer.highwaters(*owned) if owned else {}
    metrics.prom.lag.clear()  # partitions handed to another worker drop out
    for tp in owned:
        stored = by_topic[tp.topic].table.load_position(tp.topic, tp.partition) or 0
        end = ends.get(tp)
        if end is not None:
            metrics.prom.lag.labels(tp.topic, str(tp.partition)).set(max(end - stored, 0))
