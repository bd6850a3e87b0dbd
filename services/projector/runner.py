"""The projector's consumer loop: read a batch, dead-letter what is malformed, apply the rest.

Exactly-once effects over at-least-once delivery: the database, not Kafka, holds the
offsets. Each batch's rows and its next offsets commit in one transaction, and on every
assignment (and after any failed batch) the consumer seeks to the offsets stored there.

Several processes may share the topic: they form one consumer group
(``SAGALINE_PROJECTOR_GROUP_ID``, ``{app_id}-projector`` by default) that splits the
partitions, a revocation waits for the batch in flight (:mod:`services.projector.handover`),
and a batch moves its partitions' stored offsets only from where it read them, else it rolls
back whole (the fence): a partition is applied by one process at a time (SCALING.md). The
group's offsets are committed to Kafka too, after the database and at most once a second,
only so that the usual Kafka tools can show its lag.

No record can stop it: triage never raises, an unknown event type is dead-lettered (and
applied as skipped), and a batch the database keeps refusing while it answers ``SELECT 1``
is split until the refused events are found (:mod:`services.projector.isolation`); only a
database or broker that does not answer makes it wait, with growing backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord
from sqlalchemy import Engine

from readside import queries, retention, store
from readside.batch import Applied, Batch, apply_batch
from readside.engine import answering, create_read_engine
from readside.migrate import is_migrated
from readside.store import Fenced
from readside.triage import Positioned, Rejected, triage, unknown_type_reason
from runtime import tracing
from runtime.kafka_security import aiokafka_options, unreachable
from runtime.logformat import log_context
from runtime.settings import Settings
from runtime.startup_wait import Unreachable, when_reachable
from runtime.topics import DEAD_LETTERS, EVENTS, topic_partitions
from sagas.untrusted import bounded
from services.projector.handover import REVOKE_WAIT_S, Handover, Owned, group_id
from services.projector.isolation import database_answers, refused, without
from services.projector.prometheus import ProjectorPrometheus
from services.projector.tracing import ProjectorTracing
from services.worker.deadletter import DeadLetter

log = logging.getLogger(__name__)

STAGE = "projector"
POLL_MS = 200
HOUSEKEEPING_S = 5.0
KAFKA_COMMIT_S = 1.0
"""How often the offsets go to Kafka too: only its tools read them (the database holds
the projector's own), and a commit request per small batch costs what the batch does."""
PRUNE_EVERY_S = 600.0
# Sagas (or receipts) per prune transaction, and transactions per housekeeping: a prune
# holds the loop (it runs between batches) for tens of milliseconds per transaction, and
# works off up to 10,000 sagas every HOUSEKEEPING_S, far above any rate a worker finishes.
PRUNE_BATCH = 500
PRUNE_BATCHES = 20
MAX_BACKOFF_S = 30.0


class ProjectorError(RuntimeError):
    """The projector cannot start (no schema, no topic)."""


class Projector:
    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.topic = settings.topic(EVENTS)
        self.totals: Counter[str] = Counter()
        self.prom = ProjectorPrometheus()
        self._last_prune = float("-inf")
        self._last_housekeeping = time.monotonic()
        self._last_kafka_commit = float("-inf")
        self._to_commit: dict[int, int] = {}
        """Next offsets applied since the last commit to Kafka."""
        self._last_gap_warning = float("-inf")
        self._failures = 0
        """Batches failed in a row: the wait before the next attempt doubles with each."""
        self._owned = Owned()
        tracer = tracing.active()
        self._tracing = None if tracer is None else ProjectorTracing(tracer, self.topic)
        """With tracing on (runtime/tracing.py): a span per batch and per event applied."""
        self._batch = asyncio.Lock()
        """Held by a batch from its records' filtering to its commit, and by the rebalance
        listener while it hands partitions over: the two never interleave."""

    async def run(self, stop: asyncio.Event) -> None:
        """Project until ``stop`` is set; the batch in progress completes first."""
        try:
            migrated = await when_reachable(
                self.settings.database_startup_wait_s, self._schema_found, stop
            )
            if not migrated:
                raise ProjectorError("the read-model schema is missing: run `sagaline db upgrade`")
            await when_reachable(self.settings.kafka_startup_wait_s, self._start_clients, stop)
        except Unreachable as exc:
            raise ProjectorError(str(exc)) from exc
        try:
            await self._subscribe()
            while not stop.is_set():
                await self.step()
            if self._to_commit:  # for Kafka's tools only: never worth holding the stop
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._commit_to_kafka(), 2.0)
        finally:
            await self._producer.stop()
            await self._consumer.stop()

    async def _schema_found(self) -> bool:
        return await asyncio.to_thread(answering, self.engine, is_migrated)

    async def _start_clients(self) -> None:
        """New clients, started (a client whose start failed is not started again)."""
        self._consumer = AIOKafkaConsumer(
            **aiokafka_options(self.settings),
            group_id=group_id(self.settings),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self._producer = AIOKafkaProducer(
            **aiokafka_options(self.settings), enable_idempotence=True, acks="all"
        )
        try:
            await self._consumer.start()
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            await self._consumer.stop()
            raise await unreachable(self.settings, exc) from exc

    async def step(self) -> None:
        """One batch (or an idle poll), then housekeeping when it is due."""
        if self._owned.unsought and not await self._seek_unsought():
            # Assigned while the database did not answer: wait, growing, then try again.
            self._failures += 1
            await asyncio.sleep(self._backoff())
            return
        size = self.settings.projector_batch_size
        fetched = await self._consumer.getmany(timeout_ms=POLL_MS, max_records=size)
        seen = self._owned.seeks
        if fetched:
            async with self._batch:
                records = self._owned.current(fetched, seen)
                done = await self._handle(records) if records else {}
            if done is None:
                await self._recover()
            else:
                self._to_commit.update(done)
        if time.monotonic() - self._last_kafka_commit >= KAFKA_COMMIT_S:
            await self._commit_to_kafka()
        await self._measure_lag()
        if time.monotonic() - self._last_housekeeping >= HOUSEKEEPING_S:
            await asyncio.to_thread(self._housekeeping)
        if fetched and sum(map(len, fetched.values())) < size and self.settings.projector_linger_ms:
            # Below full load: let the fetcher gather the next batch (the setting's comment).
            await asyncio.sleep(self.settings.projector_linger_ms / 1000)

    async def _measure_lag(self) -> None:
        """Per partition: the end the last fetch saw, less the next offset to project."""
        for tp in list(self._consumer.assignment()):
            # Each await may let a rebalance run: ask only while the partition is ours.
            if tp.partition not in self._owned.starts or tp not in self._consumer.assignment():
                continue
            end = self._consumer.highwater(tp)
            if end is not None:
                try:
                    behind = end - await self._consumer.position(tp)
                except KafkaError:  # revoked while it waited
                    continue
                self.prom.lag.labels(tp.topic, str(tp.partition)).set(max(behind, 0))

    async def _subscribe(self) -> None:
        partitions = await topic_partitions(self._consumer, self.topic)
        if not partitions:
            raise ProjectorError(f"topic {self.topic} does not exist: run `sagaline topics create`")
        self._consumer.subscribe([self.topic], listener=Handover(self._revoked, self._assigned))

    # --- the handover (called by the group coordinator around a rebalance) --------------

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        """Let the batch in flight finish (for at most REVOKE_WAIT_S), then apply these
        partitions no more: records fetched for them are dropped from now on."""
        try:
            await asyncio.wait_for(self._batch.acquire(), REVOKE_WAIT_S)
            held = True
        except TimeoutError:
            held = False
            log.warning(
                "partitions %s revoked while a batch is still in flight after %.0f s: given "
                "up; if their next owner commits first, that batch is refused (the fence)",
                _names(revoked),
                REVOKE_WAIT_S,
            )
        try:
            self._owned.release({tp.partition for tp in revoked})
            for tp in revoked:  # their next owner reports them to Kafka from now on
                self._to_commit.pop(tp.partition, None)
            for tp in revoked:
                with contextlib.suppress(KeyError):  # no lag measured for it yet
                    self.prom.lag.remove(tp.topic, str(tp.partition))
            if revoked:
                log.info("released partitions %s of %s", _names(revoked), self.topic)
        finally:
            if held:
                self._batch.release()

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        """Seek each assigned partition to the offset stored with the rows; those whose
        offsets cannot be read now are sought before the next fetch."""
        async with self._batch:
            mine = {tp.partition for tp in assigned if tp.topic == self.topic}
            self._owned.release((set(self._owned.starts) | self._owned.unsought) - mine)
            self._owned.to_seek(mine)
            try:
                await self._seek(mine)
            except Exception as exc:
                log.warning("cannot read the stored offsets yet (%s); retrying", bounded(str(exc)))

    async def _seek_unsought(self) -> bool:
        """Seek the partitions whose stored offsets are to be read (again); False when the
        database does not answer."""
        async with self._batch:
            try:
                await self._seek(set(self._owned.unsought))
                return True
            except Exception as exc:
                log.warning("cannot read the stored offsets yet (%s); retrying", bounded(str(exc)))
                return False

    async def _seek(self, partitions: Collection[int]) -> None:
        """Seek ``partitions`` (those still assigned) to their stored offsets."""
        if not partitions:
            return
        stored = await asyncio.to_thread(self._checkpoints)
        assigned = {tp.partition: tp for tp in self._consumer.assignment()}
        fresh = [tp for p, tp in assigned.items() if p in partitions and p not in stored]
        firsts = await self._consumer.beginning_offsets(fresh) if fresh else {}
        # No await from here on: every fetch returned so far predates these seeks, and is
        # dropped (Owned.current); one returned between a seek and its mark would be too,
        # with the position already past it (seek_to_beginning awaits: hence the offsets).
        assigned = {tp.partition: tp for tp in self._consumer.assignment()}
        sought = sorted(
            p for p in partitions if p in assigned and (p in stored or assigned[p] in firsts)
        )
        for p in sought:
            tp = assigned[p]
            self._consumer.seek(tp, stored[p] if p in stored else firsts[tp])
            self._owned.sought(p, stored.get(p))
        shown = {p: stored.get(p, "start") for p in sought}
        log.info(
            "projecting partitions %s of %s from the stored offsets %s", sought, self.topic, shown
        )

    def _checkpoints(self) -> dict[int, int]:
        with self.engine.connect() as conn:
            return store.load_checkpoints(conn, self.topic)

    # --- one batch ---------------------------------------------------------------------

    async def _handle(
        self, records: Mapping[TopicPartition, Sequence[ConsumerRecord]]
    ) -> Mapping[int, int] | None:
        """Apply one batch; its next offsets, or None when it failed (then recover)."""
        events: list[Positioned] = []
        dead: list[DeadLetter] = []
        read: dict[tuple[int, int], ConsumerRecord] = {}
        next_offsets: dict[int, int] = {}
        malformed = 0
        for tp, batch in records.items():
            for record in batch:
                sorted_out = triage(record.key, record.value)
                if isinstance(sorted_out, Rejected):
                    dead.append(self._dead_letter(record, sorted_out.reason))
                    malformed += 1
                    continue
                events.append(Positioned(sorted_out, tp.partition, record.offset))
                read[tp.partition, record.offset] = record
                if (unknown := unknown_type_reason(sorted_out)) is not None:
                    # Applied all the same (skipped, its sequence counts); the letter makes
                    # it visible where every other record the projector cannot show goes.
                    dead.append(self._dead_letter(record, unknown, malformed=False))
            next_offsets[tp.partition] = batch[-1].offset + 1
        starts = {p: self._owned.starts[p] for p in next_offsets}
        epochs = {p: self._owned.sought_at[p] for p in next_offsets}
        batch_ = Batch(self.topic, events, next_offsets, malformed, started_from=starts)
        try:
            # Parked before the offsets move past them: a crash re-sends, never loses one.
            await self._send_dead_letters(dead)
            if self._tracing is None:
                applied, refused_ = await self._write_or_isolate(batch_, read)
            else:
                with self._tracing.batch(events, read):
                    applied, refused_ = await self._write_or_isolate(batch_, read)
        except Fenced as fenced:
            # Not a failure: another process moved these partitions on (it took them over, or
            # it was their owner while this one still thought it was). Nothing of this batch
            # is stored; read where they stand (if they are still ours) and go on.
            log.info("batch rolled back: %s; reading the stored offsets again", fenced)
            self._owned.to_seek(p for p in next_offsets if p in self._owned.starts)
            return {}
        except Exception:
            self._failures += 1
            log.exception("batch failed; resuming from the stored offsets")
            return None
        self._failures = 0
        self.prom.batches.inc()
        self._owned.advanced(next_offsets, epochs)
        self._report(applied, malformed + refused_)
        return next_offsets

    async def _write_or_isolate(
        self, batch: Batch, read: Mapping[tuple[int, int], ConsumerRecord]
    ) -> tuple[Applied, int]:
        """Write the batch; if its transaction fails twice while the database answers,
        dead-letter the events it refuses and write the rest (see :mod:`isolation`).
        Returns what was applied and how many events were refused."""
        for attempt in (1, 2):
            try:
                return await asyncio.to_thread(self._write, batch), 0
            except Fenced:
                raise
            except Exception as exc:
                if not await asyncio.to_thread(database_answers, self.engine):
                    raise  # down, not refusing: _recover waits for it with capped backoff
                log.warning("batch transaction failed (attempt %d): %s", attempt, bounded(str(exc)))
        found = await asyncio.to_thread(refused, self.engine, batch)
        if not found:
            raise RuntimeError("the batch fails as a whole, yet no single event of it fails")
        letters = []
        for r in found:
            record = read[r.where.partition, r.where.offset]
            letters.append(self._dead_letter(record, r.reason))
        await self._send_dead_letters(letters)
        cleaned = replace(without(batch, found), dead_lettered=batch.dead_lettered + len(found))
        return await asyncio.to_thread(self._write, cleaned), len(found)

    def _write(self, batch: Batch) -> Applied:
        with self.engine.begin() as conn:
            applied = apply_batch(conn, batch, datetime.now(UTC))
            if self.settings.projector_commit_delay_ms:  # crash tests: die inside a batch
                time.sleep(self.settings.projector_commit_delay_ms / 1000)
        return applied

    async def _send_dead_letters(self, dead: list[DeadLetter]) -> None:
        topic = self.settings.topic(DEAD_LETTERS)
        futures = [
            await self._producer.send(
                topic, d.encode(), key=d.key, headers=None if d.headers is None else [*d.headers]
            )
            for d in dead
        ]
        await asyncio.gather(*futures)

    async def _recover(self) -> None:
        """Wait, then rewind every owned partition to the database's offsets (the fetch moved
        past the failed batch); retried until the database answers. The batch lock is free
        while it waits: a rebalance meanwhile hands partitions over as usual."""
        self._owned.to_seek(list(self._owned.starts))
        backoff = self._backoff()
        while True:
            await asyncio.sleep(backoff)
            if await self._seek_unsought():
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _backoff(self) -> float:
        # Doubles with each failure in a row (the exponent capped: hours of failures must
        # not overflow a float), so a database that stays down is not hammered.
        return min(2.0 ** min(self._failures - 1, 16), MAX_BACKOFF_S)

    async def _commit_to_kafka(self) -> None:
        self._last_kafka_commit = time.monotonic()
        assigned = self._consumer.assignment()
        offsets = {TopicPartition(self.topic, p): o for p, o in self._to_commit.items()}
        offsets = {tp: o for tp, o in offsets.items() if tp in assigned}
        self._to_commit.clear()
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:  # informational only: the database holds the truth
            log.debug("could not commit offsets to Kafka: %s", exc)

    def _report(self, applied: Applied, dead: int) -> None:
        self.totals.update(
            applied=applied.applied, duplicates=applied.duplicates, dead_lettered=dead
        )
        self.prom.events.labels("applied").inc(applied.applied)
        self.prom.events.labels("duplicate").inc(applied.duplicates)
        self.prom.events.labels("dead_lettered").inc(dead)
        for event_type, count in applied.unknown.items():  # each is dead-lettered too
            self.totals["unknown_type"] += count
            self.prom.events.labels("unknown_type").inc(count)
            log.warning(
                "skipped %d event(s) of unknown type %r (their sequence numbers still count); "
                "upgrade the projector and rebuild the read models to show them",
                count,
                event_type,
            )
        if dead:
            log.warning("dead-lettered %d malformed or refused record(s)", dead)

    def _dead_letter(
        self, record: ConsumerRecord, reason: str, malformed: bool = True
    ) -> DeadLetter:
        if malformed:
            with log_context(topic=record.topic, partition=record.partition, offset=record.offset):
                log.warning(
                    "dead-lettering %s[%d]@%d: %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    reason,
                )
        letter = DeadLetter.of(record, reason, STAGE, self.settings.deadletter_inline_max_bytes)
        if self._tracing is None or not record.headers:
            return letter
        # The letter goes on in the trace of the event it parks.
        return replace(letter, headers=tuple(record.headers))

    # --- housekeeping ------------------------------------------------------------------

    def _housekeeping(self) -> None:
        self._last_housekeeping = time.monotonic()
        try:
            self._warn_about_gaps()
            self._show_last_rebuild()
            due = self._last_housekeeping - self._last_prune >= self._prune_every_s()
            # A prune that left a backlog goes on at the next housekeeping.
            if due and not self._prune():
                self._last_prune = self._last_housekeeping
        except Exception as exc:  # never worth stopping the projection for
            log.warning("housekeeping failed: %s", exc)

    def _warn_about_gaps(self) -> None:
        now = datetime.now(UTC)
        older_than = now - timedelta(seconds=self.settings.gap_alert_s)
        with self.engine.connect() as conn:
            stuck = queries.held_before(conn, older_than)
            held = queries.held_before(conn, now + timedelta(days=1), examples=0)
        self.prom.held.set(held.count)
        self.prom.held_alerting.set(stuck.count)
        quiet = time.monotonic() - self._last_gap_warning < self.settings.gap_alert_s
        if not stuck.count or quiet:
            return
        self._last_gap_warning = time.monotonic()
        shown = ", ".join(f"{key} #{seq}" for key, seq in stuck.examples)
        log.warning(
            "%d event(s) held for over %.0f s behind a sequence gap that has not filled: %s",
            stuck.count,
            self.settings.gap_alert_s,
            shown,
        )

    def _show_last_rebuild(self) -> None:
        with self.engine.connect() as conn:
            self.prom.show_rebuild(queries.rebuild_history(conn))

    def _prune_every_s(self) -> float:
        # A tenth of a short retention (the soak's minute), so rows outlive it by little.
        retention = self.settings.read_retention_s
        return min(PRUNE_EVERY_S, retention / 10) if retention else PRUNE_EVERY_S

    def _prune(self) -> bool:
        """Delete what is past the read side's retentions, a bounded amount per call
        (:mod:`readside.retention`); whether some is left for the next call."""
        now = datetime.now(UTC)
        receipts_cutoff = now - timedelta(hours=self.settings.receipt_retention_h)
        receipts = retention.prune_receipts(
            self.engine, receipts_cutoff, PRUNE_BATCH, PRUNE_BATCHES
        )
        if receipts:
            log.info("pruned %d command receipt(s) older than %s", receipts, receipts_cutoff)
        if not self.settings.read_retention_s:
            return receipts == PRUNE_BATCH * PRUNE_BATCHES
        cutoff = now - timedelta(seconds=self.settings.read_retention_s)
        pruned = retention.prune_sagas(self.engine, cutoff, PRUNE_BATCH, PRUNE_BATCHES)
        if pruned.sagas:
            log.info(
                "pruned %d saga(s) final before %s (%d timeline row(s), %d position(s))",
                pruned.sagas,
                cutoff,
                pruned.timeline,
                pruned.positions,
            )
        self.prom.pruned.inc(pruned.sagas)
        return pruned.more or receipts == PRUNE_BATCH * PRUNE_BATCHES


def _names(partitions: Collection[TopicPartition]) -> list[int]:
    return sorted(tp.partition for tp in partitions)


async def serve(settings: Settings) -> None:
    """``sagaline projector``: run until SIGTERM or SIGINT, then finish the current batch.

    Bounded (see :mod:`runtime.shutdown`): a stop that hangs on an unreachable broker or
    database (a batch retried until the database answers) ends after the grace period.
    """
    from runtime.shutdown import Watchdog  # only this entrypoint needs it

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    watchdog = Watchdog(
        STAGE,
        settings.shutdown_grace_s,
        "exiting without finishing the current batch or closing its Kafka clients "
        "(broker or database unreachable?) — nothing is lost: the next start resumes from "
        "the offsets stored with the rows",
    )

    def on_signal(signum: signal.Signals) -> None:
        watchdog.arm(signum)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    tracing.configure(settings.tracing, "projector")
    engine = create_read_engine(settings.database_url_with_password())
    tracing.instrument_engine(engine)
    projector = Projector(settings, engine)
    metrics = projector.prom.serve(settings.projector_metrics_host, settings.projector_metrics_port)
    try:
        await projector.run(stop)
    except BaseException as exc:
        if not stop.is_set():
            raise
        # aiokafka's consumer can raise while it closes without a broker (its fetcher
        # awaits the fetch task it just cancelled): a stop, not a crash to print.
        engine.dispose()
        watchdog.fail(exc)
    finally:
        engine.dispose()
        if metrics is not None:
            metrics.shutdown()
