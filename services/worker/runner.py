"""The one agent body every saga and participant runs.

For each batch of records: decide each against the freshest state for its key (earlier
records of the same batch included), send every outbound message and wait until Kafka has
acknowledged all of them, and only then store the new states. A crash before the store
replays the batch on the old states, which re-creates the very same messages (ids and
sequence numbers derive from their cause), and consumers drop the copies. A crash after
the store finds the ids in the dedupe window: nothing is decided twice.

The batch's input positions are stored with its states, after them (see
:mod:`services.worker.positions`): where each partition resumes comes from the table, not
from Faust's committed offset, so no record is skipped whatever the consumer group's
bookkeeping does. The table makes one batch's writes durable in their order (see
:meth:`Table.write`), so a position never outruns a state it covers.

A batch is the commit interval, and a key is written once per batch, with its last state,
however many of the batch's records it decided (a hot product decides dozens per batch:
one changelog record, not dozens). Why replay after a crash stays exact with that, given
:meth:`Table.write`'s order (every changelog record acknowledged, then the local store,
then the persisted changelog offset; the input positions written after the states):

- The intermediate states of a key are never stored anywhere, so nothing can restore one:
  a restart finds either the key's state from before the batch (the batch's write did not
  complete) or its last state (it did), never a state from the middle of the batch.
- If the write did not complete, the batch's input positions were not stored either (they
  come after the states, in the same acknowledged write): the whole batch is decided again
  from the states before it, in the same order, which re-creates the same intermediate
  states in memory and the same outbound messages (ids and sequences derive from their
  causes); consumers drop the copies. Some states of the batch may have reached the
  changelog without the positions: a replay then finds those keys' message ids in their
  ``seen`` windows and decides nothing twice, exactly as for a batch of one record per key
  (a batch, at most SAGALINE_BATCH_SIZE records, must fit in SAGALINE_SEEN_WINDOW: 200 in
  500 by default).
- If the write completed, the positions say where to resume, and they cover exactly the
  records whose effects the last states hold.

What must not happen, and does not: writing a key's state of the middle of the batch with
the batch's positions (the later records would be skipped on replay yet not reflected), or
carrying a state across batches without its positions (a later batch's positions would
outrun it).

Stores that span batches (``store_every_s``, SAGALINE_STORE_EVERY_MS). A batch of two
records pays a whole store: a produce request and its acknowledgement, a RocksDB write, the
persisted offset, a changelog record per key and one for the position (BENCHMARKS.md,
issue 27). So the batches decided within the span are stored together, once: each batch's
outputs are still sent and acknowledged before the next batch is decided, while their
states and positions are held back *together* and written in one :meth:`Table.write`, each
key once with its last state, the positions of the span's last batch after them. That is
the argument above with "the batch" read as "the span": a span is a batch whose records
came in several deliveries. Its records are decided in offset order on the states the
span's earlier records left, exactly as one batch's are; a crash before the span's write
completes leaves the states and positions from before the span, so the whole span is
decided again from there (its outputs re-created with the same ids), and a write cut
part-way leaves some keys' last states without the positions, found again by the keys'
``seen`` windows, which is why a span holds at most SAGALINE_SEEN_WINDOW records (a store
comes first when the next batch would pass it). What the span adds: pending states are
read by the next batches (never by the cache, which holds only what the table holds), and
a rebalance voids them: a span decided before one is not stored, the positions are read
again from the table (a partition kept resumes there, with a seek), and its records are
decided again there or by the partition's new owner. A span is stored when the next batch
finds it due, or by a task of the runner when no batch comes (:meth:`_store_when_due`); a
revocation waits for that task's store in flight and voids what is pending
(:meth:`revoked`), so no store lands while Faust revokes and recovers the partitions.
Deadlines of pending states are scheduled when they are stored, up to a span late.

A key's histories (its seen ids, a participant's finished reservations:
:mod:`sagas.machinery.history`) are stored apart from its record, in chunks written once,
so the record written each batch stays small however long the history. A key's writes in
a batch come in this order, all in its own table partition: the chunks its histories
sealed since its stored record, the deletions of chunks its stored record no longer reads,
then the record (:meth:`Record.writes`). A crash leaves a prefix of them:

- without the record, the stored record and every chunk it reads are as they were: a new
  chunk is read by no stored record (and a replay writes it again, under the same key, with
  the same entries), and a deleted chunk was read by neither record (a history's front only
  moves forward);
- with the record, every chunk it reads was written before it.

So the key decodes to its state before the batch or after it, which is all the argument
above asks of a key. The chunks a record stops reading are deleted by the key's next write
(when no stored record can read them any more); a key never written again keeps those of
its last batch, a few at most.

A retired key (:mod:`sagas.machinery.retirement`) is written twice more, each time in a
batch of its own key's tick. Its retirement replaces the final record with a marker: an
ordinary write (the marker reads no chunk, so the rule above holds; the chunks the record
sealed stay, read by nobody). Its deletion writes, in order, the tombstones of every chunk
the marker's histories still count, then the marker's own tombstone
(:meth:`Record.deletes`), changelog first like every write. Cut after any of them, the key
holds its marker (which reads no chunk, so deleting chunks first cannot break it) or
nothing; the batch's positions come after, so a cut one is replayed, and the replayed tick
finds the marker still due and deletes again. A deletion never happens in the batch that
retired the key (the marker's deadline lies a positive retention after it), and a key
deleted then made anew in one batch writes the deletion's tombstones before the new
record's chunks (all of them, as for a key the table does not hold).

A record Kafka would refuse is never sent: a decision whose outbound message is over
``SAGALINE_MAX_MESSAGE_BYTES``, or whose state would be a changelog record over
:data:`MAX_STATE_BYTES`, is not applied; its input is dead-lettered with the reason and the
key keeps its state from before it (a batch whose store failed that way would be retried
forever, its partition stopped). Only states that are stored are measured: a key's last of
the batch, once, before anything is sent.

Decoded states stay in a :class:`~services.worker.state_cache.StateCache` between batches;
it is filled only from what the table returned or after a write returned, so a decision
never sees a state the table does not hold.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from runtime.logformat import log_context
from runtime.tracing import Headers, inject_headers, traceparent
from sagas.machinery.history import PARTIAL, is_chunk_key
from sagas.machinery.process import Outbound, Process
from sagas.machinery.record import Record
from sagas.machinery.retirement import Retirement
from sagas.machinery.step import StepResult, step
from sagas.messages import ContractError, Envelope
from sagas.untrusted import MAX_RECORD_BYTES
from services.worker.deadletter import DEFAULT_INLINE_MAX_BYTES, DeadLetter
from services.worker.deadlines import (
    DEADLINE_KEY_PREFIX,
    YIELD_EVERY,
    DeadlineIndex,
    entries_until,
    entry_key,
    indexed_key,
    parse_entry,
)
from services.worker.metrics import Metrics
from services.worker.positions import InputPositions, Plan, Rewind
from services.worker.state_cache import StateCache
from services.worker.tracing import DEADLINE_HEADER, StepTracing, remembered_context

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger(__name__)

MAX_STATE_BYTES = 1_000_000 - 1_024
"""The largest changelog record (key and value) a state may be stored as: the producer's
max request size (Faust's ``producer_max_request_size``, 1,000,000 bytes, which the worker
keeps; the broker's default max message size, 1,048,588, is larger) less a record batch's
framing (under 100 bytes) with margin. A larger one would be refused on every retry of its
batch, and the partition would stop."""

STORE_RETRY_FIRST_S = 0.5
STORE_RETRY_MAX_S = 30.0
"""Backoff of a store of pending states that failed with no batch coming to retry it."""

_AFTER_EVERY_ENTRY = DEADLINE_KEY_PREFIX[:-1] + "0"
"""Sorts after every index entry's key ("0" follows the prefix's "/")."""

_TAILS_ONLY = {PARTIAL: True}
"""Decoding for the deadline scan: a record's deadlines, without its histories' chunks."""


class Send(Protocol):
    """Queue ``value`` under ``key`` on a topic; the awaited result is the delivery future.
    Headers are given only with tracing on (the trace context: runtime/tracing.py)."""

    def __call__(
        self, topic: str, key: bytes, value: bytes, headers: Headers | None = None, /
    ) -> Awaitable[Awaitable[Any]]: ...


Seek = Callable[[str, int, int], Awaitable[None]]
"""Make the consumer deliver a partition again from an offset."""


FirstOffset = Callable[[str, int, int], Awaitable[int | None]]
"""The first offset at or after the given one that holds a record (None: cannot tell)."""


async def _no_seek(topic: str, partition: int, offset: int) -> None:
    """For runners without a consumer (tools, tests): nothing to rewind."""


async def _cannot_tell(topic: str, partition: int, offset: int) -> int | None:
    return None


@dataclass(frozen=True)
class Incoming:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float | None = None
    """When its producer sent it (Kafka's CreateTime, epoch seconds), if known."""
    headers: Headers | None = None
    """Its Kafka headers (read only with tracing on: its producer's trace context)."""


@dataclass(frozen=True)
class StateWrite:
    """A key's new state, stored in the table partition of the input partition it came in on
    (the record's key chose that partition, so every record of the key comes there)."""

    key: str
    value: bytes | None
    """None deletes the key (a history chunk no state reads any more)."""
    partition: int


Positions = Mapping[tuple[str, int], int]
"""Per (input topic, partition): the next offset to process."""


class Table(Protocol):
    """Per-key state storage, partitioned like the input topic; it also keeps each input
    partition's position, in that partition's part of the store."""

    def load(self, key: str, partition: int) -> bytes | None: ...

    def load_position(self, topic: str, partition: int) -> int | None: ...

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        """Store a batch's states, then its positions. Returns once they are durable; a
        crash at any moment must leave, per partition, a prefix of these writes in order
        (never a position without the states before it)."""
        ...

    def held_partitions(self) -> Sequence[int]:
        """The partitions whose part of the store this worker holds."""
        ...

    def index_keys(self, partition: int, start: str, stop: str) -> Iterable[str]:
        """The keys of ``partition`` from ``start`` (included) to ``stop`` (excluded), in
        order: how the deadline index's entries are read (:mod:`services.worker.deadlines`)."""
        ...

    def needs_index(self, partition: int) -> bool:
        """Whether ``partition`` may hold records whose deadlines have no index entry (it was
        written by a version without them): its records are read once to write them."""
        ...

    def records(self, partition: int) -> Iterable[tuple[str, bytes]]:
        """Every record of ``partition`` (no positions, index entries or history chunks)."""
        ...


class DictTable(dict[str, bytes]):
    """An in-memory :class:`Table`, for tests and tools."""

    def __init__(self) -> None:
        super().__init__()
        self.positions: dict[tuple[str, int], int] = {}
        self.partition_of: dict[str, int] = {}

    def load(self, key: str, partition: int) -> bytes | None:
        return self.get(key)

    def load_position(self, topic: str, partition: int) -> int | None:
        return self.positions.get((topic, partition))

    async def write(self, states: Sequence[StateWrite], positions: Positions) -> None:
        for s in states:
            if s.value is None:
                self.pop(s.key, None)
            else:
                self[s.key] = s.value
                self.partition_of[s.key] = s.partition
        self.positions.update(positions)

    def held_partitions(self) -> Sequence[int]:
        return sorted(
            {self.partition_of.get(k, 0) for k in self} | {p for _, p in self.positions} or {0}
        )

    def index_keys(self, partition: int, start: str, stop: str) -> Iterable[str]:
        return sorted(
            k for k in self if start <= k < stop and self.partition_of.get(k, 0) == partition
        )

    def needs_index(self, partition: int) -> bool:
        return indexed_key(partition) not in self

    def records(self, partition: int) -> Iterable[tuple[str, bytes]]:
        return [
            (k, v)
            for k, v in list(self.items())
            if self.partition_of.get(k, 0) == partition
            and not k.startswith("\x00")
            and not is_chunk_key(k)
        ]


@dataclass
class ProcessRunner:
    process: Process[Any]
    table: Table
    send: Send
    topic_for: Callable[[str], str]
    dead_letter_topic: str
    metrics: Metrics
    deadlines: DeadlineIndex = field(default_factory=DeadlineIndex)
    seen_window: int = 500
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    seek: Seek = _no_seek
    first_offset: FirstOffset = _cannot_tell
    monotonic: Callable[[], float] = time.monotonic
    max_message_bytes: int = MAX_RECORD_BYTES
    max_state_bytes: int = MAX_STATE_BYTES
    retirement: Retirement | None = None
    """How long final records and then their markers are kept (None: nothing retires)."""
    deadletter_inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    state_cache_keys: int = 2_000
    tracing: StepTracing | None = None
    """Spans of its decisions and the trace context of what it sends (None: tracing is off,
    and the batch path builds no span, context nor header)."""
    store_every_s: float = 0.0
    """How long decided states may wait to be stored, so that the batches of that span are
    stored in one write (0: each batch's states are stored before it returns). Their
    outputs are sent and acknowledged batch by batch either way ("Stores that span batches"
    in the module doc)."""

    def __post_init__(self) -> None:
        self._codec = Record.codec(self.process.state_type)
        self.last_deadline_scan = (0, 0)
        """Records the latest deadline rebuild read, and how many of them it decoded (only
        a partition's first, when it had no index entries yet)."""
        self.last_entries_read = 0
        """Index entries the latest rebuild or extension read."""
        self.positions = InputPositions(self.table.load_position)
        self.states = StateCache(self.state_cache_keys)
        self._writing = asyncio.Lock()
        """Held around every table write: a batch's, and the index repair's (one writer at
        a time keeps the local store applied in the changelog's order)."""
        self._pending: _BatchDecisions | None = None
        """Decided, sent and acknowledged, not stored yet (see :attr:`store_every_s`)."""
        self._batching = asyncio.Lock()
        """Held by a batch and by a store of pending states: one of them at a time."""
        self._flush_task: asyncio.Task[None] | None = None

    @property
    def topic(self) -> str:
        """The topic this process consumes."""
        return self.topic_for(self.process.name)

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def input_topics(self) -> tuple[str, ...]:
        return (self.topic,)

    async def rebuild_deadlines(
        self, monotonic_now: float, interrupted: Callable[[], bool] = lambda: False
    ) -> bool:
        """Re-index the deadlines this worker's table holds from its index entries due
        within the horizon (:mod:`services.worker.deadlines`), in slices between which
        batches run (False: a rebalance interrupted it; see :meth:`DeadlineIndex.rebuild`).
        A partition without entries yet (written by an older version) has its records read
        once first, and the entries they lack written."""
        self.last_deadline_scan = (0, 0)
        for partition in self.table.held_partitions():
            if self.table.needs_index(partition) and not await self._index_partition(
                partition, interrupted
            ):
                self.deadlines.stale = True
                return False
        horizon = self.deadlines.horizon
        until = None if horizon is None else self.clock() + horizon
        entries = self._entries(None, until)
        try:
            return await self.deadlines.rebuild(entries, monotonic_now, interrupted, until)
        finally:
            entries.close()

    async def extend_deadlines(self, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Read the index entries due within the horizon from now that the heap does not
        hold yet (:meth:`DeadlineIndex.extend`)."""
        horizon = self.deadlines.horizon
        if horizon is None:
            return True
        return await self.deadlines.extend(self._entries, self.clock() + horizon, interrupted)

    def _entries(
        self, after: datetime | None, until: datetime | None
    ) -> Generator[tuple[str, datetime | None]]:
        """(key, due) of every index entry due after ``after`` and up to ``until`` (None:
        from the first, to the last) of the partitions the table holds."""
        start = DEADLINE_KEY_PREFIX if after is None else entries_until(after)[1]
        stop = _AFTER_EVERY_ENTRY if until is None else entries_until(until)[1]
        read = 0
        try:
            for partition in self.table.held_partitions():
                for table_key in self.table.index_keys(partition, start, stop):
                    read += 1
                    yield parse_entry(table_key)
        finally:
            self.last_entries_read = read
            self.metrics.inc(self.process.name, "deadline_entries_read", read)

    async def _index_partition(self, partition: int, interrupted: Callable[[], bool]) -> bool:
        """Write the index entry of every record of ``partition`` that has a deadline, then
        the partition's flag (once per partition, after an upgrade: every write since keeps
        the entries). A batch that changes a key meanwhile writes its own entries: at worst
        one read here is left over, which costs a tick that fires nothing."""
        entries: list[StateWrite] = []
        dates = self._due_dates(self.table.records(partition))
        try:
            for n, (key, due) in enumerate(dates, start=1):
                if due is not None:
                    entries.append(StateWrite(entry_key(key, due), b"", partition))
                if n % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                    if interrupted():
                        return False
        finally:
            dates.close()
        if interrupted():
            return False
        entries.append(StateWrite(indexed_key(partition), b"1", partition))
        async with self._writing:
            await self.table.write(entries, {})
        log.info(
            "%s[%d]: indexed the deadlines of %d records once (%d with a deadline)",
            self.name,
            partition,
            self.last_deadline_scan[0],
            len(entries) - 1,
        )
        return True

    def _due_dates(
        self, items: Iterable[tuple[str, bytes]]
    ) -> Generator[tuple[str, datetime | None]]:
        scanned = decoded = 0
        try:
            for key, raw in items:
                if is_chunk_key(key):
                    continue  # a history's chunk, not a state
                scanned += 1
                if Record.surely_without_deadlines(raw):
                    yield key, None
                    continue
                decoded += 1
                try:
                    due = self._codec.model_validate_json(raw, context=_TAILS_ONLY).next_deadline()
                except ValueError as exc:
                    # Every message of this key is dead-lettered for the same reason (its
                    # state cannot be read): no tick could fire anything either. Skipping
                    # it keeps one bad record from failing every rebuild.
                    log.error("%s: the record of %r cannot be decoded: %s", self.name, key, exc)
                    due = None
                yield key, due
        finally:
            self.last_deadline_scan = (scanned, decoded)
            self.metrics.inc(self.process.name, "deadline_scan_keys", scanned)
            self.metrics.inc(self.process.name, "deadline_scan_decoded", decoded)

    def load(self, key: str, partition: int) -> Record[Any] | None:
        """The table's state of ``key``, decoded (from the cache when it holds it)."""
        if (cached := self.states.get(key, partition)) is not None:
            return cached
        raw = self.table.load(key, partition)
        if raw is None:
            return None
        record = self._codec.decode(key, raw, lambda chunk: self.table.load(chunk, partition))
        self.states.put(key, partition, record, self.states.generation)
        return record

    async def handle_batch(self, batch: Sequence[Incoming]) -> None:
        """Process a batch: decide it, send its outputs and wait for their
        acknowledgements, then store its states now or, with :attr:`store_every_s`, with
        the batches that follow within that span. When it raises it is retried: its
        outputs were not all acknowledged (nothing of it is kept), or a store failed (what
        was decided and sent stays pending, is stored first on the retry, and its records
        are then found processed)."""
        async with self._batching:
            self._drop_pending_after_rebalance()
            pending = self._pending
            if pending is not None and (
                self._due(pending) or pending.records + len(batch) > self.seen_window
            ):
                await self._store_pending()
            await self._decide_and_send(batch)
            pending = self._pending
            if pending is not None and self._due(pending):
                await self._store_pending()
        if self._pending is not None:
            self._store_later()

    async def _decide_and_send(self, batch: Sequence[Incoming]) -> None:
        """Decide ``batch`` on the pending states, send its outputs, and keep its states
        and positions pending."""
        self._count_transit(batch)
        plan = self.positions.plan(batch, self.monotonic())
        admitted = plan.admitted(batch)
        now = self.clock()
        started = time.perf_counter()
        base = self._pending or _BatchDecisions(self.states.generation, self.monotonic())
        decided = self._decide_batch(base.fork(), admitted, now, check_states=False)
        decided_at = time.perf_counter()
        if not self._state_writes(decided):
            # A key's state would not fit its changelog record: decide the batch again,
            # checking each decision's state, so the record that made it too large is
            # dead-lettered and the key's later records are decided on the state before it
            # (rare, so the common path encodes each key's state once per batch, not once
            # per decision). Nothing was sent yet; the decisions are pure, so the second
            # pass decides the others exactly as the first did.
            decided = self._decide_batch(base.fork(), admitted, now, check_states=True)
            assert self._state_writes(decided), "every applied state was checked"
        encoded_at = time.perf_counter()  # encoding the states counts as storing them
        await self._publish(decided.outbound, decided.dead)
        published = time.perf_counter()
        if admitted:
            decided.records += len(admitted)
            decided.dead_count += len(decided.dead)
            decided.positions.update(positions_to_store(plan, batch))
            self._pending = decided
        self.positions.commit(plan)
        self._count_skipped(plan)
        await self._rewind(plan.rewinds)
        name = self.process.name
        self.metrics.inc(name, "batches")
        self.metrics.inc(name, "records", len(batch))
        self.metrics.add_time(name, "decide", decided_at - started)
        self.metrics.add_time(name, "publish", published - encoded_at)
        self.metrics.add_time(name, "store", encoded_at - decided_at)

    def _due(self, pending: _BatchDecisions) -> bool:
        return self.monotonic() - pending.since >= self.store_every_s

    def _drop_pending_after_rebalance(self) -> None:
        """Pending states decided before a rebalance are not stored: a partition may have
        moved. The positions are read again from the table, so their records are processed
        again from there (here or by the new owner), re-creating the same outputs."""
        pending = self._pending
        if pending is None or pending.generation == self.states.generation:
            return
        self._pending = None
        self.positions.forget()
        self.metrics.inc(self.process.name, "pending_dropped", pending.records)

    async def _store_pending(self) -> None:
        """Store the pending states and positions in one write (the batch lock held)."""
        self._drop_pending_after_rebalance()
        pending = self._pending
        if pending is None:
            return
        started = time.perf_counter()
        writes = [w for key in pending.fresh for w in pending.writes[key]]
        try:
            async with self._writing:
                await self.table.write(writes, pending.positions)
        except BaseException:
            # Some of the states may be stored, some not: the cache knows neither.
            self.states.discard(pending.fresh)
            raise
        self._pending = None
        for key, rec in pending.fresh.items():
            self.deadlines.fired.pop(key, None)  # its left-over entry, if any, is deleted
            if rec is None:
                self.deadlines.schedule(key, None)
                self.states.discard((key,))
                continue
            self.deadlines.schedule(key, rec.next_deadline())
            self.states.put(key, pending.partitions[key], rec, pending.generation)
        # Served once stored: a failed store is retried, and counted then (the JSON counters
        # count at decide time, retries and a second pass included).
        name = self.process.name
        self.metrics.prom.count_batch(
            name, len(pending.applied), pending.duplicates, pending.dead_count
        )
        for done in pending.applied:
            self.metrics.prom.observe(
                name, self.process.entity_type, done.envelope, done.before, done.result, done.now
            )
        self.metrics.inc(name, "stores")
        self.metrics.add_time(name, "store", time.perf_counter() - started)

    async def revoked(self, partitions: Iterable[int]) -> None:
        """Partitions are being revoked: their states leave the cache and a new generation
        begins, which voids the pending states (every partition's: the assignment after
        may move any of them); then wait for a store already in flight. Faust's revocation
        waits for the agents' events, which a batch acknowledges after its own store, but
        not for a store of pending states begun by :meth:`_store_when_due`: without this
        wait that store could reach the changelog and the local store while Faust revokes
        and recovers the same partitions (RELIABILITY.md, "Stores that span batches")."""
        self.states.drop_partitions(partitions)
        async with self._batching:
            self._drop_pending_after_rebalance()

    async def stopping(self) -> None:
        """The worker is stopping: store what is pending now, and each later batch's states
        before the next. A clean stop then leaves nothing decided and acknowledged to be
        decided again at the next start, where the settings may have changed (a record
        dead-lettered for a limit the restart raised would be decided anew, beside its
        letter) and the outputs would be sent a second time. A crash still decides the
        span again (module doc): that is the guarantee; this only keeps a stop clean."""
        self.store_every_s = 0.0
        async with self._batching:
            await self._store_pending()

    def _store_later(self) -> None:
        """Make sure pending states are stored once due, should no batch come to do it."""
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._store_when_due())

    async def _store_when_due(self) -> None:
        backoff = STORE_RETRY_FIRST_S
        while (pending := self._pending) is not None:
            wait = pending.since + self.store_every_s - self.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                async with self._batching:
                    if self._pending is pending:
                        await self._store_pending()
                backoff = STORE_RETRY_FIRST_S
            except Exception as exc:
                # As for a batch (services/worker/agents.py): the next batch, or this loop
                # after a pause, stores them; nothing of them is lost meanwhile.
                self.metrics.inc(self.process.name, "store_retries")
                log.warning(
                    "%s: storing %d pending record(s) failed (%s: %s); retrying in %.1f s",
                    self.process.name,
                    pending.records,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, STORE_RETRY_MAX_S)

    def _decide_batch(
        self, b: _BatchDecisions, records: Iterable[Incoming], now: datetime, check_states: bool
    ) -> _BatchDecisions:
        """Each record decided into ``b`` on its key's freshest state. A decision whose
        message or (with ``check_states``) whose state would be too large is not applied:
        its record is dead-lettered."""
        tracing = self.tracing
        for record in records:
            if tracing is None:
                self._decide_one(record, b, now, check_states, None)
            else:
                self._decide_traced(tracing, record, b, now, check_states)
        return b

    def _decide_one(
        self,
        record: Incoming,
        b: _BatchDecisions,
        now: datetime,
        check_states: bool,
        headers: Headers | None,
    ) -> _Decided | None:
        """Decide ``record`` into ``b``; what it sends carries ``headers``."""
        result = self._decide(record, b.fresh, b.stored, now, b.dead)
        if result is None:
            return None
        encoded = [self._encode(o, headers) for o in result.result.outbound]
        too_large = self._too_large(encoded)
        if not result.result.changed:
            # Nothing to store; a refusal to a key the table does not hold is still sent
            # (sagas/machinery/step.py): a redelivery sends it again, under the same id.
            b.duplicates += 1
            if too_large:
                b.dead.append(self._letter(record, too_large))
            else:
                b.outbound.extend(encoded)
            return result
        deleted = result.result.deleted
        if too_large is None and check_states and not deleted:
            key = result.record_key
            too_large = self._state_too_large(key, result.result.record, b.stored[key])
        if too_large:
            b.dead.append(self._letter(record, too_large))
            return result
        b.applied.append(result)
        b.touched.add(result.record_key)
        b.fresh[result.record_key] = None if deleted else result.result.record
        if deleted:
            b.deleted.add(result.record_key)
        b.partitions[result.record_key] = record.partition
        b.outbound.extend(encoded)
        return result

    def _decide_traced(
        self,
        tracing: StepTracing,
        record: Incoming,
        b: _BatchDecisions,
        now: datetime,
        check_states: bool,
    ) -> None:
        """:meth:`_decide_one` inside the record's span, whose context what it sends carries;
        the key's deadline entry keeps it (a tick's span links back to it). A record of an
        unsampled trace gets no span: its context is passed on as it came."""
        if (passed_on := tracing.passed_on(record.headers)) is not None:
            decided = self._decide_one(record, b, now, check_states, passed_on)
            if decided is not None and (kept := traceparent(passed_on)) is not None:
                b.traces[decided.record_key] = kept
            return
        remembered = self._remembered(record)
        with tracing.step(
            record.topic, record.partition, record.offset, record.key, record.headers, remembered
        ) as current:
            headers = tuple(current.headers)
            decided = self._decide_one(record, b, now, check_states, headers)
            if decided is None:
                return
            result = decided.result
            tracing.describe(
                current.span,
                decided.envelope,
                decided.before,
                result.record,
                result.outbound,
                _outcome(result),
            )
            if (kept := traceparent(headers)) is not None:
                b.traces[decided.record_key] = kept

    def _remembered(self, record: Incoming) -> Context | None:
        """For a tick, the context its key kept with the deadline it fires for (None: not a
        tick, or none kept): the traceparent in the deadline's index entry."""
        due = next((v for k, v in record.headers or () if k == DEADLINE_HEADER), None)
        if due is None or record.key is None:
            return None
        try:
            when = datetime.fromisoformat(due.decode())
            kept = self.table.load(entry_key(record.key.decode(), when), record.partition)
        except (ValueError, UnicodeDecodeError):
            return None
        return remembered_context(kept)

    def _state_writes(self, b: _BatchDecisions) -> bool:
        """Note in ``b.writes`` what stores each key this batch changed, over the table's
        state (False: one would be too large for its changelog record). Notes in
        ``b.fresh`` each such record as it will be stored."""
        for key in b.touched:
            rec, stored = b.fresh[key], b.stored[key]
            writes: list[tuple[str, bytes | None]] = []
            first, last = self._entry_writes(key, stored, rec, b.traces.get(key, b""))
            if key in b.deleted and stored is not None:
                # The stored marker and its chunks go (sagas/machinery/retirement.py); a
                # record made after that in these batches is a new key's: none of it was
                # stored.
                writes += stored.deletes(key)
                stored = None
            if rec is not None:
                b.fresh[key], written = rec.writes(key, stored)
                writes += written
            writes = [*first, *writes, *last]
            if _largest_write(writes)[1] > self.max_state_bytes:
                return False
            b.writes[key] = [StateWrite(k, v, b.partitions[key]) for k, v in writes]
        return True

    def _entry_writes(
        self,
        key: str,
        stored: Record[Any] | None,
        new: Record[Any] | None,
        remembered: bytes = b"",
    ) -> tuple[list[tuple[str, bytes | None]], list[tuple[str, bytes | None]]]:
        """The index entries a key's writes start and end with (services/worker/
        deadlines.py): its new next deadline's entry before its record, its old one's
        deletion after it, and the deletion of a left-over entry its last tick came from.
        A new entry's value is ``remembered``: with tracing on, the traceparent of the step
        that set the deadline (its tick's span links to it); empty otherwise."""
        old_due = None if stored is None else stored.next_deadline()
        new_due = None if new is None else new.next_deadline()
        first: list[tuple[str, bytes | None]] = []
        last: list[tuple[str, bytes | None]] = []
        if new_due != old_due:
            if new_due is not None:
                first.append((entry_key(key, new_due), remembered))
            if old_due is not None:
                last.append((entry_key(key, old_due), None))
        fired = self.deadlines.fired.get(key)
        if fired is not None and fired != new_due and fired != old_due:
            last.append((entry_key(key, fired), None))
        return first, last

    def _state_too_large(
        self, key: str, record: Record[Any], stored: Record[Any] | None
    ) -> str | None:
        """A state too large for the changelog would make Kafka refuse the batch's store
        on every retry and stop the partition: the decision that made it is not applied."""
        name, size = _largest_write(record.writes(key, stored)[1])
        if size <= self.max_state_bytes:
            return None
        self.metrics.inc(self.process.name, "state_too_large")
        return (
            f"the state of {key!r} it would leave would be a {size}-byte changelog record "
            f"({name!r}), over the {self.max_state_bytes}-byte limit of one; nothing of it "
            "was applied"
        )

    def _count_transit(self, batch: Sequence[Incoming]) -> None:
        """How long records took from their producer's send to this batch: the broker round
        trip, the fetch, Faust's delivery and the wait for this agent's previous batch
        (beside the batch's own stages, it shows where a hop's time goes)."""
        sent = [r.timestamp for r in batch if r.timestamp is not None]
        if sent:
            now = time.time()
            self.metrics.add_time(self.process.name, "transit", sum(now - t for t in sent))
            self.metrics.inc(self.process.name, "transit_records", len(sent))

    def _count_skipped(self, plan: Plan) -> None:
        count_skipped(self.metrics, self.process.name, plan)

    async def _rewind(self, rewinds: Sequence[Rewind]) -> None:
        await rewind(
            rewinds, self.process.name, self.positions, self.seek, self.first_offset, self.metrics
        )

    async def reseek_overdue(self) -> None:
        """Ask again for the seeks back whose expected offset has not come (positions.py);
        between batches, so no batch is planned on positions this moves."""
        async with self._batching:
            await self._rewind(self.positions.overdue(self.monotonic()))

    def _decide(
        self,
        incoming: Incoming,
        fresh: dict[str, Record[Any] | None],
        stored: dict[str, Record[Any] | None],
        now: datetime,
        dead: list[DeadLetter],
    ) -> _Decided | None:
        with log_context(
            topic=incoming.topic, partition=incoming.partition, offset=incoming.offset
        ) as bound:
            return self._decide_in_context(incoming, fresh, stored, now, dead, bound)

    def _decide_in_context(
        self,
        incoming: Incoming,
        fresh: dict[str, Record[Any] | None],
        stored: dict[str, Record[Any] | None],
        now: datetime,
        dead: list[DeadLetter],
        bound: dict[str, Any],
    ) -> _Decided | None:
        name = self.process.name
        try:
            envelope = Envelope.decode(incoming.value)
            bound.update(
                (k, v)
                for k, v in (
                    ("message_id", envelope.message_id),
                    ("saga_id", envelope.saga_id),
                    ("causation_id", envelope.causation_id),
                )
                if v is not None
            )
            key = envelope.key
            # The record's key chose the partition, hence the table partition the state lives
            # in: a record without one, or with another key than its envelope's, would read
            # and write the state of a key this partition does not own.
            if incoming.key is None:
                raise ContractError(f"record has no key (envelope key {key!r})")
            if incoming.key != key.encode():
                shown = incoming.key[:60].decode(errors="replace")
                raise ContractError(f"record key {shown!r} differs from envelope key {key!r}")
            if key in fresh:
                current: Record[Any] | None = fresh[key]
            else:
                current = stored[key] = self.load(key, incoming.partition)
            result = step(self.process, current, envelope, now, self.seen_window, self.retirement)
        except ContractError as exc:
            self.metrics.inc(name, "invalid")
            log.warning("%s: dead-lettering %s@%s: %s", name, incoming.topic, incoming.offset, exc)
            dead.append(self._letter(incoming, str(exc)))
            return None
        except Exception as exc:  # an agent must never die silently: park the record, go on
            self.metrics.inc(name, "errors")
            log.exception("%s: failed on %s@%s", name, incoming.topic, incoming.offset)
            dead.append(self._letter(incoming, f"{type(exc).__name__}: {exc}"))
            return None
        self.metrics.inc(name, _outcome(result))
        return _Decided(key, result, envelope, current, now)

    def _letter(self, record: Incoming, reason: str) -> DeadLetter:
        letter = DeadLetter.of(record, reason, self.process.name, self.deadletter_inline_max_bytes)
        if self.tracing is None:
            return letter
        # Inside the record's span: the letter carries its context, and the span the failure.
        self.tracing.failed(reason)
        return replace(letter, headers=tuple(inject_headers()))

    def _encode(self, outbound: Outbound, headers: Headers | None = None) -> _Encoded:
        envelope = outbound.envelope
        return _Encoded(
            self.topic_for(outbound.channel),
            envelope.key.encode(),
            envelope.encode(),
            envelope,
            headers,
        )

    def _too_large(self, encoded: list[_Encoded]) -> str | None:
        """Kafka would refuse such a record on every retry and stall the stream: the
        decision that made it is not applied, and its input is dead-lettered instead."""
        for e in encoded:
            if (size := len(e.key) + len(e.value)) > self.max_message_bytes:
                self.metrics.inc(self.process.name, "too_large")
                return (
                    f"its {e.envelope.type} to {e.topic} would be {size} bytes, over the "
                    f"{self.max_message_bytes}-byte limit (SAGALINE_MAX_MESSAGE_BYTES); "
                    "nothing of it was applied"
                )
        return None

    async def _publish(self, outbound: list[_Encoded], dead: list[DeadLetter]) -> None:
        if self.tracing is None:
            futures = [await self.send(o.topic, o.key, o.value) for o in outbound]
        else:
            futures = [await self.send(o.topic, o.key, o.value, o.headers) for o in outbound]
        futures.extend([await self._send_letter(d) for d in dead])
        # Wait for every acknowledgement before the states are stored (see module doc).
        await asyncio.gather(*futures)
        self.metrics.inc(self.process.name, "sent", len(outbound))
        self.metrics.inc(self.process.name, "dead_lettered", len(dead))

    async def _send_letter(self, letter: DeadLetter) -> Awaitable[Any]:
        key, value = letter.key or b"", letter.encode()
        if letter.headers is None:
            return await self.send(self.dead_letter_topic, key, value)
        return await self.send(self.dead_letter_topic, key, value, letter.headers)


def _outcome(result: StepResult) -> str:
    """The counter a decided record counts in."""
    if result.duplicate:
        return "duplicates"
    if result.retired:
        return "retired_dropped"  # a message for a retired key (sagas/machinery/retirement.py)
    if result.unchanged:
        return "unchanged"  # changed nothing of a key the table does not hold: not stored
    return "forgotten" if result.deleted else "processed"


def _largest_write(writes: Sequence[tuple[str, bytes | None]]) -> tuple[str, int]:
    """The key and size (key and value) of the largest of a key's writes."""
    sizes = [(k, len(k.encode()) + len(v)) for k, v in writes if v is not None]
    return max(sizes, key=lambda ks: ks[1], default=("", 0))


@dataclass
class _BatchDecisions:
    """What deciding records produced: per batch, what it sends; accumulated over the
    batches whose states are not stored yet, each key's latest state and the writes that
    store it."""

    generation: int
    """The state cache's generation when the first of these batches was decided: a
    rebalance since voids them (:meth:`ProcessRunner._drop_pending_after_rebalance`)."""
    since: float
    """When the first of these batches was decided (monotonic seconds)."""
    records: int = 0
    """Records decided (admitted) in these batches: a store must not cover more than a
    key's seen window holds (module doc)."""
    fresh: dict[str, Record[Any] | None] = field(default_factory=dict)
    """Each key's latest state (None: deleted)."""
    deleted: set[str] = field(default_factory=set)
    """Keys deleted in these batches (a retired key's marker expired): their writes start
    with the tombstones of the stored marker and its chunks."""
    stored: dict[str, Record[Any] | None] = field(default_factory=dict)
    """Each key's state in the table."""
    partitions: dict[str, int] = field(default_factory=dict)
    writes: dict[str, list[StateWrite]] = field(default_factory=dict)
    """Per key, what stores its latest state over the table's, in order."""
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """The input positions these batches moved to."""
    applied: list[_Decided] = field(default_factory=list)
    duplicates: int = 0
    dead_count: int = 0
    traces: dict[str, bytes] = field(default_factory=dict)
    """With tracing on: each key's last decision's traceparent (its deadline entry keeps it)."""
    touched: set[str] = field(default_factory=set)
    """Keys whose state this batch changed (their writes are computed again)."""
    outbound: list[_Encoded] = field(default_factory=list)
    """This batch's messages."""
    dead: list[DeadLetter] = field(default_factory=list)
    """This batch's dead letters."""

    def fork(self) -> _BatchDecisions:
        """A copy to decide the next batch into: the accumulated part copied (a batch that
        fails leaves this one as it was), the batch's own part empty."""
        return _BatchDecisions(
            generation=self.generation,
            since=self.since,
            records=self.records,
            fresh=dict(self.fresh),
            deleted=set(self.deleted),
            stored=dict(self.stored),
            partitions=dict(self.partitions),
            writes=dict(self.writes),
            positions=dict(self.positions),
            applied=list(self.applied),
            duplicates=self.duplicates,
            dead_count=self.dead_count,
            traces=dict(self.traces),
        )


@dataclass(frozen=True)
class _Encoded:
    topic: str
    key: bytes
    value: bytes
    envelope: Envelope
    headers: Headers | None = None


@dataclass(frozen=True)
class _Decided:
    record_key: str
    result: StepResult
    envelope: Envelope
    before: Record[Any] | None
    now: datetime


# --- what every runner of positioned input does once a batch's effects are durable --------
# (the process runner above, and the Debezium ingest edge: services/worker/ingest.py)


def positions_to_store(plan: Plan, batch: Sequence[Incoming]) -> Positions:
    """The partitions this batch processed something of moved on; the others did not."""
    processed = {
        (record.topic, record.partition)
        for record, verdict in zip(batch, plan.verdicts, strict=True)
        if verdict == "process"
    }
    return {tp: offset for tp, offset in plan.next_offsets().items() if tp in processed}


def count_skipped(metrics: Metrics, name: str, plan: Plan) -> None:
    for verdict in ("replayed", "stale"):
        if n := plan.verdicts.count(verdict):
            metrics.inc(name, f"skipped_{verdict}", n)


async def rewind(
    rewinds: Sequence[Rewind],
    name: str,
    positions: InputPositions,
    seek: Seek,
    first_offset: FirstOffset,
    metrics: Metrics,
) -> None:
    """Seek every partition a batch found a gap in (or whose seek back is overdue) back to
    its expected offset."""
    for back in rewinds:
        try:
            await _seek_back(
                back.topic,
                back.partition,
                back.offset,
                name,
                positions,
                seek,
                first_offset,
                metrics,
            )
        except Exception:
            # The records past the gap keep arriving: the seek is asked for again.
            log.exception("%s: seek failed; will retry", name)


async def _seek_back(
    topic: str,
    partition: int,
    offset: int,
    name: str,
    positions: InputPositions,
    seek: Seek,
    first_offset: FirstOffset,
    metrics: Metrics,
) -> None:
    metrics.inc(name, "rewinds")
    exists_from = await first_offset(topic, partition, offset)
    if exists_from is not None and positions.skip_missing(topic, partition, offset, exists_from):
        metrics.inc(name, "offsets_missing", exists_from - offset)
        log.warning(
            "%s: %s[%d] offsets %d..%d hold no record (retention deleted them, or "
            "transaction markers); resuming at %d",
            name,
            topic,
            partition,
            offset,
            exists_from - 1,
            exists_from,
        )
        offset = exists_from
    else:
        log.warning(
            "%s: %s[%d] delivered records past offset %d, which was never processed; "
            "seeking back to it",
            name,
            topic,
            partition,
            offset,
        )
    await seek(topic, partition, offset)
