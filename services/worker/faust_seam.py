"""Every reach into Faust's internals, in one module, behind a version guard.

The worker leans on parts of faust-streaming (and of mode and aiokafka as Faust drives them)
that are not its documented API: private attributes, the shape of its internal calls, its
on-disk layout. Each is one small function or name here, with what it relies on and why, and
every other module calls it from here. Upgrading Faust means re-reading this module against
the new version, then widening :data:`TESTED_FAUST`; the worker refuses to start on a
version outside it (:func:`require_tested_faust`, run when this module is imported, before
anything of Faust's is touched, and again by ``create_app``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka.consumer.subscription_state import TopicPartitionState
from aiokafka.protocol.group import JoinGroupRequest
from packaging.specifiers import SpecifierSet
from yarl import URL

log = logging.getLogger(__name__)

TESTED_FAUST = SpecifierSet(">=0.15.3,<0.16")
"""The faust-streaming versions every function below was checked against."""


class UntestedFaust(RuntimeError):
    """The installed faust-streaming is outside :data:`TESTED_FAUST`."""


def installed_faust_version() -> str:
    return version("faust-streaming")


def require_tested_faust() -> None:
    """Refuse to go on with a faust-streaming this module was not checked against: a changed
    internal would fail at run time in ways no test here has seen (a store ahead of its
    changelog, a seek that never takes), not at start."""
    installed = installed_faust_version()
    if installed not in TESTED_FAUST:
        raise UntestedFaust(
            f"faust-streaming {installed} is installed, but the worker reaches into Faust "
            f"internals tested only with faust-streaming {TESTED_FAUST}: install a tested "
            f"version (pip install 'faust-streaming[rocksdict]{TESTED_FAUST}') or re-check "
            "services/worker/faust_seam.py against it and widen TESTED_FAUST."
        )


require_tested_faust()

# Faust is imported only once its version is known to be one these internals exist in.
import faust  # noqa: E402
import faust.streams  # noqa: E402
from faust.assignor.client_assignment import (  # noqa: E402
    CopartitionedAssignment as CopartitionedAssignment,  # for orphan_promotion
)
from faust.assignor.copartitioned_assignor import (  # noqa: E402
    CopartitionedAssignor as CopartitionedAssignor,  # for orphan_promotion
)
from faust.exceptions import ImproperlyConfigured  # noqa: E402
from faust.stores import STORES  # noqa: E402
from faust.stores.memory import Store as MemoryStore  # noqa: E402
from faust.stores.rocksdb import RocksDBOptions  # noqa: E402
from faust.stores.rocksdb import Store as RocksDBStore  # noqa: E402
from faust.streams import _current_event  # noqa: E402
from faust.tables.recovery import RebalanceAgain, Recovery  # noqa: E402
from faust.transport.consumer import Consumer, ThreadDelegateConsumer  # noqa: E402
from faust.transport.drivers import aiokafka as faust_aiokafka  # noqa: E402
from faust.types import TP, AppT, CollectionT  # noqa: E402
from mode.services import WaitResults  # noqa: E402

from services.worker.changelog_reads import ChangelogReads, Read  # noqa: E402

UNKNOWN_MEMBER_ID: str = JoinGroupRequest.UNKNOWN_MEMBER_ID
"""The member id aiokafka holds while the group does not know its consumer."""

# --- the producer ---------------------------------------------------------------------------


def _idempotent_settings(self: Any) -> dict[str, Any]:
    return {"acks": "all", "enable_idempotence": True}


def make_producers_idempotent() -> None:
    """Faust's aiokafka producer takes extra settings from ``Producer._settings_extra``,
    which enables idempotence only inside transactions; we want it always, so a producer
    retry can neither duplicate nor reorder records of one partition (every app of the
    process)."""
    faust_aiokafka.Producer._settings_extra = _idempotent_settings  # type: ignore[method-assign]


async def send_record(
    app: faust.App,
    topic: str,
    key: bytes,
    value: bytes | None,
    partition: int | None,
    headers: Sequence[tuple[str, bytes]] | None = None,
) -> Awaitable[Any]:
    """Queue a record on the app's producer; the result is its delivery future. Faust's
    low-level ``producer.send(topic, key, value, partition, timestamp, headers)``: raw bytes
    to one partition, without a Faust topic's codecs or its per-send bookkeeping; headers
    only with tracing on (runtime/tracing.py), None otherwise."""
    sent = None if headers is None else list(headers)
    future: Awaitable[Any] = await app.producer.send(topic, key, value, partition, None, sent)
    return future


def guard_produce_requests(app: faust.App, guard: Callable[[], None]) -> None:
    """Call ``guard`` as the app's producer puts each produce request on the wire: aiokafka's
    ``Sender`` drains the batches ready for a broker into one request in a task of its
    own (``_send_produce_req``), which builds the request and writes it to the connection
    without an await between (an idle connection's lock is taken at once). The instance's
    producer factory (Faust's ``Producer._new_producer``) is wrapped, so every producer the
    app starts is guarded; transactional ones too (Sagaline starts none)."""
    producer: Any = app.producer
    new_producer = producer._new_producer

    def guarded_producer(*args: Any, **kwargs: Any) -> Any:
        client = new_producer(*args, **kwargs)
        sender = client._sender
        send_request = sender._send_produce_req

        async def send_guarded(node_id: int, batches: Any) -> None:
            guard()
            await send_request(node_id, batches)

        sender._send_produce_req = send_guarded
        return client

    producer._new_producer = guarded_producer


# --- the consumer ---------------------------------------------------------------------------


class OnTheAppLoop:
    """Stands in for mode's ``WorkerThread`` (a ``ServiceThread``'s ``Worker``): runs the
    service's body as a task of its ``thread_loop``, which must be its parent loop."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.task: asyncio.Task[None] | None = None
        # At its end the body cancels every task of its loop but itself (mode's
        # ServiceThread._gather_remaining_tasks): here, every agent's.
        service._gather_remaining_tasks = _sweep_nothing.__get__(service)

    def start(self) -> None:
        self.task = self.service.parent_loop.create_task(self._serve())
        # The body reports its own failure (mode's ServiceThread.crash, up to the app).
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _serve(self) -> None:
        try:
            await self.service._serve()
        except BaseException:
            # What mode's _start_thread does when the body raises: a stop waiting for the
            # body's shutdown signal, which the body may not have reached, is not left to
            # its 60 s timeout.
            self.service.set_shutdown()
            raise

    def stop(self) -> None:
        """Nothing to join: ``ServiceThread.stop`` has waited for the body's shutdown signal,
        which it gives before its last steps (the app's stop gathers the task after)."""

    def is_alive(self) -> bool:
        return self.task is not None and not self.task.done()


async def _sweep_nothing(self: Any) -> None:
    return None


def consumer_on_the_app_loop(app: faust.App) -> None:
    """Run the app's aiokafka consumer on the app's event loop, not in a thread of its own.

    Faust gives its consumer a thread with a second loop (``ConsumerThread``) so heartbeats
    go on while an agent holds the loop. Every fetch then crosses the threads twice (a
    method queue there, ``call_soon_threadsafe`` back), each a wake-up of the other loop and
    a hand-over of the GIL: below full load a tenth to a seventh of the worker's CPU
    (BENCHMARKS.md, issue 27, "The consumer on the app's loop"). The worker seldom holds its
    loop long: a batch is at most SAGALINE_BATCH_SIZE records, the long passes yield every
    few milliseconds or run in a thread, and the longest holds left (a partition's first
    deadline indexing, about 2 s a million keys; Faust's ``gc.collect`` at a revocation)
    are far inside the session timeout (10 s, a heartbeat each second). Faust's and mode's
    calls between the two loops (method queues, ``call_soon_threadsafe``) work within one.
    Only this app's transport makes the consumer below. Relies on:
    ``Transport.create_consumer`` making ``Transport.Consumer``; ``ThreadDelegateConsumer``
    asking ``_new_consumer_thread``; ``ServiceThread`` taking ``thread_loop`` and ``Worker``,
    its ``start`` calling the ``Worker``'s and waiting for ``_serve``, the thread's whole
    body, and signalling its shutdown before its last steps."""
    app.transport.Consumer = _AppLoopConsumer  # type: ignore[misc]


class _AppLoopConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return faust_aiokafka.AIOKafkaConsumerThread(
            self, loop=self.loop, thread_loop=self.loop, Worker=OnTheAppLoop, beacon=self.beacon
        )


class InputReadOffsets(dict[TP, int | None]):
    """Faust's read offsets (``Consumer._read_offset``), read as nothing for input topics.

    Faust's delivery loop drops every record below a partition's read offset and raises that
    offset to each record it delivers, also to the records of a fetch made before a seek,
    which it goes on delivering after it: the records the seek fetches again are then
    dropped (RELIABILITY.md, defect 13). The runners decide for themselves what they have
    read (services/worker/positions.py), so for their input topics the loop reads no read
    offset and delivers every record; changelogs keep Faust's filter (its recovery and
    standbys rely on it)."""

    def __init__(self, input_topics: frozenset[str], current: Mapping[TP, int | None]) -> None:
        super().__init__(current)
        self.input_topics = input_topics
        self._disowned: dict[TP, int] = {}

    def __getitem__(self, tp: TP) -> int | None:
        if tp.topic in self.input_topics:
            return None
        return self.get(tp)  # None when unknown, as Faust's defaultdict gives

    def __setitem__(self, tp: TP, offset: int | None) -> None:
        if offset is not None and self._disowned.get(tp) == offset:
            del self._disowned[tp]  # the delivery loop's own write, right after the hand-over
            return
        super().__setitem__(tp, offset)

    def disown(self, tp: TP, offset: int) -> None:
        """The delivery loop's next write of ``offset`` for ``tp`` is not kept (see
        :func:`disown_stale_hand_over`)."""
        self._disowned[tp] = offset


def count_partition_reads() -> None:
    """Number the reads of each partition on aiokafka's ``TopicPartitionState`` (one per
    partition and assignment): every ``seek``, ``reset_to`` (the position a reset found)
    and ``await_reset`` (the position dropped) begins a new one. What
    :mod:`services.worker.changelog_reads` compares. On the class, once."""
    state: Any = TopicPartitionState
    if getattr(state, "_sagaline_counts_reads", False):
        return
    for name in ("seek", "reset_to", "await_reset"):
        setattr(state, name, _new_read(getattr(state, name)))
    state._sagaline_counts_reads = True


def _new_read(method: Callable[..., Any]) -> Callable[..., Any]:
    def begin_read(self: Any, *args: Any) -> Any:
        self._sagaline_reads = getattr(self, "_sagaline_reads", 0) + 1
        return method(self, *args)

    return begin_read


def _partition_read(consumer: Any, tp: Hashable) -> Read | None:
    """``tp``'s current read on the worker's aiokafka consumer: its state object in the
    current assignment and that state's read count; None when it is not assigned."""
    client = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    subscription = None if client is None else client._subscription.subscription
    assignment = None if subscription is None else subscription.assignment
    state = None if assignment is None else assignment.state_value(tp)
    return None if state is None else (state, getattr(state, "_sagaline_reads", 0))


def _read_goes_on(read: Read) -> bool:
    """Whether no seek or reset of the partition's state came since ``read`` began, and its
    assignment is still the consumer's (aiokafka unassigns the old one at each rebalance)."""
    state: Any = read[0]
    return getattr(state, "_sagaline_reads", 0) == read[1] and state._assignment.active


def changelog_reads(consumer: Any) -> ChangelogReads:
    """The consumer's :class:`ChangelogReads` (made on first use)."""
    reads: ChangelogReads | None = getattr(consumer, "_sagaline_changelog_reads", None)
    if reads is None:
        reads = ChangelogReads(lambda tp: _partition_read(consumer, tp), _read_goes_on)
        consumer._sagaline_changelog_reads = reads
    return reads


def read_changelogs_without_gaps() -> None:
    """Hand Faust's recovery only changelog records of their partition's current read
    (:mod:`services.worker.changelog_reads`).

    Each batch aiokafka hands over (``AIOKafkaConsumerThread._fetch_records``) is noted with
    its changelog partitions' reads in the same step; Faust's ``Consumer.getmany`` then
    hands on a record only if its partition is still in that read, so a stale one neither
    reaches the recovery nor raises the partition's read offset (which would make Faust's
    delivery loop drop the records the new read fetches again, defect 14). Records handed on
    before their read ended are refused later, at the hand-over (services/worker/delivery.py)
    and at the recovery's queue (:func:`skip_untracked_changelog_records`). On the classes,
    once; the reads are each consumer's."""
    count_partition_reads()
    thread: Any = faust_aiokafka.AIOKafkaConsumerThread
    consumer_class: Any = Consumer
    if getattr(thread, "_sagaline_notes_reads", False):
        return
    fetch_records, getmany = thread._fetch_records, consumer_class.getmany

    async def fetch_noted(self: Any, client: Any, *args: Any, **kwargs: Any) -> Any:
        records = await fetch_records(self, client, *args, **kwargs)
        consumer = self.consumer
        changelog_reads(consumer).drained(records, consumer._is_changelog_tp)
        return records

    async def current_only(self: Any, timeout: float) -> Any:
        reads = changelog_reads(self)
        async for tp, message in getmany(self, timeout):
            if reads.hand_on(tp, message):
                yield tp, message
        reads.report_skipped()

    thread._fetch_records = fetch_noted
    consumer_class.getmany = current_only
    thread._sagaline_notes_reads = True


def disown_stale_hand_over(consumer: Any, message: Any) -> None:
    """A changelog record whose hand-over outlived its partition's read (a seek or a new
    assignment came meanwhile, services/worker/delivery.py): the delivery loop is about to
    raise the partition's read offset to it. That write is not kept, so the records the new
    read fetches again are delivered; the recovery refuses the record itself
    (:func:`skip_untracked_changelog_records`). RELIABILITY.md, defects 14 and 16."""
    offsets: InputReadOffsets = consumer._read_offset  # the worker's: none other delivers so
    offsets.disown(message.tp, message.offset)


def deliver_every_input_record(app: faust.App, input_topics: Sequence[str]) -> None:
    """Turn off Faust's read-offset filter for ``input_topics`` (see :class:`InputReadOffsets`);
    before the consumer starts, since its delivery loop binds the mapping's methods once."""
    consumer: Any = app.consumer
    consumer._read_offset = InputReadOffsets(frozenset(input_topics), consumer._read_offset)


def handed_message(waitable: Any) -> Any:
    """The record a not yet started hand-over, Faust's ``callback(message)`` (the topic
    conductor's ``on_message``), is about to deliver: its ``message`` argument; None for
    anything else."""
    frame = getattr(waitable, "cr_frame", None)
    return None if frame is None else frame.f_locals.get("message")


async def seek_and_wait(app: faust.App, offsets: Mapping[TP, int]) -> None:
    """``Consumer.seek_wait`` (undocumented): runs aiokafka's seeks through the consumer's
    method queue, where its fetcher runs, and waits for the positions. With Faust's consumer
    thread (SAGALINE_CONSUMER_THREAD=true), Faust's ``seek`` called aiokafka from the app's
    thread while the fetcher ran in the other, mid-fetch most of the time: once in a CI run a
    seek back over a gap never took, and in soak run 9 a seek deleted a partition's fetched
    records between the fetcher listing them and reading them (``KeyError`` in
    ``Fetcher.fetched_records``; RELIABILITY.md, defect 11). On the app's loop (the default)
    both are steps of one loop and the race cannot happen; every seek of the worker's Faust
    consumer still goes through here, for either."""
    if offsets:
        await app.consumer.seek_wait(offsets)


def after_seek_to_committed(app: faust.App, then: Callable[[], Awaitable[None]]) -> None:
    """Run ``then`` each time Faust has sought the assigned partitions to their committed
    offsets: after every assignment, once the tables are recovered, Faust calls its
    consumer's ``perform_seek``; the instance's method is replaced by one that calls Faust's
    and then ``then``."""
    consumer = app.consumer
    seek_to_committed = consumer.perform_seek

    async def perform_seek() -> None:
        await seek_to_committed()
        await then()

    consumer.perform_seek = perform_seek  # type: ignore[method-assign]


METADATA_RETRY_S = 1.0
"""How often the group's leader asks for the metadata of topics it assigned without."""


def rejoin_when_topics_appear(app: faust.App, retry_s: float = METADATA_RETRY_S) -> None:
    """Have the group's leader ask for metadata again, until it has it, when it assigned
    partitions without some subscribed topic's metadata.

    A leader whose metadata lacks a topic (a worker started while the broker was down, and
    elected right after the broker came back: the topics' partitions not yet in its
    metadata) gives nobody that topic's partitions (Faust's assignor: "Ignoring missing
    topic"). aiokafka rejoins when the leader's metadata of the subscribed topics changes,
    but only refreshes metadata every ``consumer_metadata_max_age_ms`` (5 minutes): the whole
    group held no partition that long (RELIABILITY.md, run 03195910a1). The assignor's
    ``assign`` (run by aiokafka's coordinator, on the consumer's loop) is wrapped:
    with a topic missing, a task forces a metadata update every ``retry_s`` until every
    missing topic is known; that update is what makes aiokafka rejoin and assign again."""
    assignor: Any = app.assignor
    assign = assignor.assign

    def assign_then_watch(cluster: Any, member_metadata: Mapping[str, Any]) -> Any:
        assignment = assign(cluster, member_metadata)
        subscribed = {t for m in member_metadata.values() for t in m.subscription}
        missing = sorted(t for t in subscribed if not cluster.partitions_for_topic(t))
        if missing and not _watching:  # one watch at a time: it asks for every topic
            log.warning(
                "assigned without the metadata of %d subscribed topic(s) (%s): asking for "
                "it every %g s; the group rejoins once it arrives",
                len(missing),
                ", ".join(missing[:3]),
                retry_s,
            )
            client = app.consumer._thread._ensure_consumer()._client  # type: ignore[attr-defined]
            task = asyncio.get_running_loop().create_task(
                refresh_until_known(client, cluster, missing, retry_s)
            )
            _watching.add(task)
            task.add_done_callback(_watching.discard)
        return assignment

    assignor.assign = assign_then_watch


_watching: set[asyncio.Task[None]] = set()
"""The metadata watches running (a task needs a reference while it runs)."""


async def refresh_until_known(
    client: Any, cluster: Any, topics: Sequence[str], retry_s: float
) -> None:
    """Force aiokafka's metadata update until ``cluster`` knows every one of ``topics``
    (the client asks for every topic it is subscribed to, these among them)."""
    while any(not cluster.partitions_for_topic(t) for t in topics):
        await client.force_metadata_update()
        await asyncio.sleep(retry_s)


def group_member(app: faust.App) -> bool:
    """Whether the group coordinator still knows this process's consumer as a member.

    aiokafka resets its member id (``GroupCoordinator.member_id``, on the consumer's loop)
    to ``JoinGroupRequest.UNKNOWN_MEMBER_ID`` (the empty string) when the coordinator
    answers that it does not recognize the member or its generation (its session expired:
    the process stalled, or the broker was unreachable, for longer than the session
    timeout), when it leaves the group, and before its first join; the next JoinGroup
    response brings a new id. Until the consumer has started there is no coordinator:
    no member either. A plain attribute read (from any thread, with the consumer thread on)."""
    consumer = getattr(app.consumer._thread, "_consumer", None)  # type: ignore[attr-defined]
    coordinator = getattr(consumer, "_coordinator", None)
    return coordinator is not None and coordinator.member_id != UNKNOWN_MEMBER_ID


def seek_unread_changelogs_from_the_start() -> None:
    """A changelog partition whose offset Faust's recovery never built is sought to the start.

    ``Recovery._seek_offsets`` (faust/tables/recovery.py) seeks each partition of its live
    set to the offset it built at the start of reading, ``-1`` (no persisted offset) mapped to
    0. A rebalance landing while a recovery finishes adds standby partitions to that live set
    with ``None`` (``Recovery._add``, no persisted offset), and aiokafka refuses to seek to
    ``None``: the Recovery service crashed and the worker stopped (three harness runs,
    RELIABILITY.md "Defect 12"). ``None`` is what ``_build_offsets`` turns into ``-1``
    for the same partition, so it is sought as ``-1`` is: to 0, the earliest record (the
    recovery that follows builds its offsets properly). On the class, once."""
    recovery: Any = Recovery
    if getattr(recovery, "_sagaline_seeks_unbuilt", False):
        return
    seek_offsets = recovery._seek_offsets

    async def _seek_offsets(self: Any, consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        for tp in tps:
            if offsets.get(tp) is None:
                offsets[tp] = -1
        await seek_offsets(self, consumer, tps, offsets, title)

    recovery._seek_offsets = _seek_offsets
    recovery._sagaline_seeks_unbuilt = True


def no_recovery_step_past_a_rebalance() -> None:
    """A recovery that a rebalance interrupts takes no further step: the new one starts over.

    ``Recovery._restart_recovery`` (faust/tables/recovery.py) runs each step through
    ``_wait``, which raises ``RebalanceAgain`` when ``signal_recovery_start`` fires. But the
    wait for the active changelogs to be read (``signal_recovery_end``) sits in a ``try``
    whose ``except Exception`` only finishes a tracing span: the ``RebalanceAgain`` is
    swallowed, and the interrupted recovery goes on as if it were done -- "Done reading from
    changelog topics", "Recovery complete", then its standby seeks, now of the *new*
    generation's standby partitions to offsets it never built for them, or its completion
    callbacks -- before the new recovery starts (RELIABILITY.md, defect 16). So ``_wait``
    starts no step once the signal is set (the new recovery, which clears it, runs them all
    again), and gives up a step that ends as it is set (its own check reads the signal's
    waiter, which may not have run yet). On the class, once."""
    recovery: Any = Recovery
    if getattr(recovery, "_sagaline_rechecks_rebalance", False):
        return
    wait = recovery._wait

    async def _wait(self: Any, coro: Any, timeout: Any = None) -> None:
        if self.signal_recovery_start.is_set():
            close = getattr(coro, "close", None)
            if close is not None:
                close()  # never started
            raise RebalanceAgain()
        await wait(self, coro, timeout=timeout)
        if self.signal_recovery_start.is_set():
            raise RebalanceAgain()

    recovery._wait = _wait
    recovery._sagaline_faust_wait = wait
    recovery._sagaline_rechecks_rebalance = True


def keep_standby_changelog_on_resume(app: faust.App) -> None:
    """Stop Faust from throwing away a standby's changelog records when flow resumes.

    Faust's changelog queue is cleared whenever ``app.flow_control.resume()`` runs
    (``clear_on_resume=True``, faust/tables/manager.py), and its recovery resumes flow again
    after it has resumed the standby partitions and awaited the tables' callbacks and the
    stream partitions' seek (faust/tables/recovery.py, ``on_recovery_completed``). What the
    fetcher queued for a standby in between is dropped while the consumer's position has
    moved past it: the standby applies the later records, its persisted offset runs ahead
    of its store, and a promotion reads nothing again (RELIABILITY.md, "A worker lost among
    three"). The queue's ``clear`` is replaced by one that keeps the records a standby
    partition still assigned here has not applied yet, in their order. Keeping them cannot
    leave a gap: they follow what was applied, in fetch order, within the partition's
    current read; a record of a read that has ended since (the partition was a revoked
    active's, or was sought again) is refused when the recovery takes it
    (:func:`read_changelogs_without_gaps`, defect 16). Everything else is dropped, as Faust
    does: records of active partitions are read again from their sought offsets, records of
    partitions no longer held here must not be applied at all."""
    tables: Any = app.tables  # the TableManager; its interface lacks the queue and recovery
    queue = tables.changelog_queue
    pending = queue._queue  # asyncio.Queue's deque, which mode's own ``clear`` empties

    def clear() -> None:
        recovery = tables._recovery  # None until Faust's first rebalance made it
        kept = [event for event in pending if _standby_owes(recovery, event.message)]
        pending.clear()
        pending.extend(kept)

    queue.clear = clear
    skip_untracked_changelog_records(app)


def skip_untracked_changelog_records(app: faust.App) -> None:
    """Hand Faust's recovery loop only records of partitions it tracks now.

    A revocation's ``flow_control.clear()`` runs before the next assignment is known, so the
    records a standby partition has not applied are kept (:func:`keep_standby_changelog_on_resume`)
    even when that partition is taken away from this process; ``Recovery.on_rebalance`` then
    drops it from ``standby_tps``. A record of it still queued when the recovery loop
    (``Recovery._slurp_changelogs``) reaches it is in neither ``active_tps`` nor
    ``standby_tps``: Faust logs "recovery unknown topic" and goes on with the table and the
    offsets of the record before it (a known fall-through of faust-streaming 0.15), so the
    record is applied to the partition of the same number of ANOTHER table, whose persisted
    offset becomes this changelog's offset (soak soakfd6711: an order-saga deadline entry and
    offset 173435 in inventory-state-0.db, ConsistencyError at the next standby start). The
    queue's ``get``, which that loop calls for every record, is replaced by one that drops
    such records: they belong to a partition this process no longer holds, which Faust must
    not apply at all.

    The loop awaits ``get`` through ``asyncio.wait_for``, which runs it as a task of its
    own: a rebalance can drop the partition between ``get`` returning and the loop looking
    at the record (fault run 003130b531, cycle 6: a transfer-saga position applied to
    payment-state, RELIABILITY.md, defect 15). So the record is handed over as a
    :class:`_HeldWhenRead`, which asks again when the loop first reads its ``message``,
    in the same step as the loop's own check."""
    tables: Any = app.tables
    queue = tables.changelog_queue
    get = queue.get
    reads = changelog_reads(app.consumer)

    async def get_tracked() -> Any:
        while True:
            event = await get()
            recovery = tables._recovery  # None until Faust's first rebalance made it
            refusal = _refusal(recovery, reads, event.message)
            if refusal is not None:
                _log_dropped(event.message, refusal)
                continue
            return event if recovery is None else _HeldWhenRead(event, recovery, reads)

    queue.get = get_tracked


class NoLongerHeld(Exception):
    """A changelog record the recovery loop was being handed when its partition stopped
    being held here or was sought again; the loop logs it ("Error in recovery") and goes on."""


class _HeldWhenRead:
    """A changelog event for Faust's recovery loop, checked once more when the loop first
    reads its ``message``: nothing is awaited between that read and the loop's own ``tp in
    active_tps`` / ``standby_tps``, so the record is either held and of its partition's
    current read then, or never reaches the loop. Everything else is the event's."""

    __slots__ = ("_checked", "_event", "_reads", "_recovery")

    def __init__(self, event: Any, recovery: Any, reads: ChangelogReads) -> None:
        self._event = event
        self._recovery = recovery
        self._reads = reads
        self._checked = False

    @property
    def message(self) -> Any:
        message = self._event.message
        if not self._checked:
            self._checked = True
            refusal = _refusal(self._recovery, self._reads, message)
            if refusal is not None:
                _log_dropped(message, refusal)
                raise NoLongerHeld(f"{message.tp} offset {message.offset}: {refusal}")
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


def _refusal(recovery: Any, reads: ChangelogReads, message: Any) -> str | None:
    """Why Faust's recovery must not apply ``message``, or None."""
    if reads.is_stale(message):
        return "read before its partition was sought again or reassigned"
    if recovery is not None and not _tracked(recovery, message.tp):
        return "no longer held here"
    return None


class _Drops:
    """The changelog records the recovery refuses, said at most once a second per partition
    and reason (a rebalance can refuse a whole queue of them); a line counts those since the
    last."""

    EVERY_S = 1.0

    def __init__(self) -> None:
        self._since: Counter[tuple[Any, str]] = Counter()
        self._said_at: dict[tuple[Any, str], float] = {}

    def __call__(self, message: Any, refusal: str) -> None:
        key = (message.tp, refusal)
        self._since[key] += 1
        now = time.monotonic()
        if now - self._said_at.get(key, -self.EVERY_S) < self.EVERY_S:
            return
        self._said_at[key] = now
        log.info(
            "dropped %d changelog record(s) of %s, the last at offset %d: %s",
            self._since.pop(key),
            message.tp,
            message.offset,
            refusal,
        )


_log_dropped = _Drops()


def _tracked(recovery: Any, tp: TP) -> bool:
    """Whether Faust's recovery holds ``tp`` as an active or a standby changelog partition."""
    return tp in recovery.active_tps or tp in recovery.standby_tps


def _standby_owes(recovery: Any, message: Any) -> bool:
    """Whether ``message`` is a changelog record of a partition this process holds as a
    standby and has not applied yet (its offset above the highest applied)."""
    if recovery is None or message.tp not in recovery.standby_tps:
        return False
    applied = recovery.standby_offsets.get(message.tp)
    return applied is None or message.offset > applied


def fetch_only_active_partitions() -> None:
    """Never let aiokafka read Faust's empty set of active partitions as "every partition".

    Faust's consumer hands its live set of active partitions to aiokafka's
    ``Fetcher.fetched_records`` (faust/transport/drivers/aiokafka.py, ``_fetch_records``),
    which drains the records of every partition when that set is empty (``if partitions and
    tp not in partitions``). The set is emptied while the call waits for records, by the
    recovery's pause of its active changelog partitions when they are read ("Done reading
    from changelog topics") or a rebalance's pause of the assignment, and aiokafka keeps
    fetching partitions Faust only marks paused (standbys at their sought offsets among
    them). So a standby's first records were drained, their position moved past them, and
    Faust's ``getmany`` handed none on (their partition not active): the standby store
    missed everything below where it was started (RELIABILITY.md, defect 10). aiokafka is
    given a view of the same live set that is never falsy: an empty set now drains nothing.
    On every Faust consumer of the process, once."""
    thread: Any = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread, "_sagaline_only_active", False):
        return
    fetch_records = thread._fetch_records

    async def fetch_active(
        self: Any, consumer: Any, active_partitions: Any, *args: Any, **kwargs: Any
    ) -> Any:
        only = None if active_partitions is None else OnlyThese(active_partitions)
        return await fetch_records(self, consumer, only, *args, **kwargs)

    thread._fetch_records = fetch_active
    thread._sagaline_only_active = True


class OnlyThese:
    """A live set of partitions as aiokafka reads a filter: membership from the set, and
    never falsy (an empty filter would mean every partition)."""

    def __init__(self, partitions: Any) -> None:
        self.partitions = partitions

    def __bool__(self) -> bool:
        return True

    def __contains__(self, tp: object) -> bool:
        return tp in self.partitions


def report_dropped_records() -> None:
    """Log the records Faust's consumer takes from aiokafka but does not hand on.

    ``Consumer.getmany`` (faust/transport/consumer.py) drains a batch for the partitions it
    calls active, which moves aiokafka's position past it, then hands on each record only if
    its partition is still in that (live, shared) set and the generation has not changed.
    A record it skips is read again only if something seeks its partition back: a new
    assignment does; a partition paused, or its buffer declared full, in between does not.
    Logged so that a fault run shows whether this happens when a standby store misses
    records (RELIABILITY.md, defect 10): at INFO when a rebalance came between or a
    revocation stopped the flow (the next assignment seeks again), else at WARNING. Nothing
    is changed; on every Faust consumer of the process, once."""
    if getattr(Consumer, "_sagaline_reports_drops", False):
        return
    waiting, counted = _reporting(Consumer._wait_next_records, Consumer.getmany)
    consumer: Any = Consumer  # its methods replaced on the class: mypy sees them as fixed
    consumer._wait_next_records, consumer.getmany = waiting, counted
    consumer._sagaline_reports_drops = True


def _reporting(
    wait: Callable[..., Awaitable[Any]], getmany: Callable[..., Any]
) -> tuple[Callable[..., Awaitable[Any]], Callable[..., Any]]:
    """``wait`` and ``getmany`` wrapped: the first keeps what it drained on the consumer,
    the second counts what it hands on and compares."""

    async def waiting(self: Any, timeout: float) -> Any:
        records, active = await wait(self, timeout)
        self._sagaline_drained = (records, self.app.consumer_generation_id)
        return records, active

    async def counted(self: Any, timeout: float) -> Any:
        self._sagaline_drained = None
        handed: dict[Any, int] = {}
        async for tp, message in getmany(self, timeout):
            handed[tp] = handed.get(tp, 0) + 1
            yield tp, message
        drained, generation = self._sagaline_drained or ({}, None)
        # A revocation stops the flow (and pauses every partition) before the generation
        # changes: the assignment that follows seeks them all again. Not app.rebalancing:
        # that holds through the recovery too, where a drop is what this is here to show.
        moved = generation != self.app.consumer_generation_id or not self.flow_active
        skipped = changelog_reads(self).skipped  # said by their own line
        for tp, records in drained.items():
            if records and len(records) > handed.get(tp, 0) + skipped[tp]:
                log.log(
                    logging.INFO if moved else logging.WARNING,
                    "the consumer took %d record(s) of %s (offsets %d-%d) from the fetcher "
                    "and handed on %d%s",
                    len(records),
                    tp,
                    records[0].offset,
                    records[-1].offset,
                    handed.get(tp, 0),
                    " (a rebalance came between)" if moved else "",
                )

    return waiting, counted


def changing_hands(app: faust.App) -> bool:
    """Whether partitions are moving (``app.rebalancing``) or tables recovering
    (``app.in_recovery``): Faust's own flags, set by its rebalance and recovery services."""
    return bool(app.rebalancing or app.in_recovery)


FAUST_WAIT_FIRST = Consumer.wait_first
"""Faust's (mode's) ``Service.wait_first``, as the consumer had it before
:func:`replace_consumer_wait_first`."""

DrainResults = WaitResults
"""What ``wait_first`` returns (mode's ``WaitResults``), which Faust's drain loop reads."""


def is_drain_flow_wait(consumer: Any, waitable: Any) -> bool:
    """Whether ``waitable`` is a not yet started ``consumer.suspend_flow.wait()``. Faust's
    ``Consumer._drain_messages`` hands each record over with ``wait_first(callback(message),
    self.suspend_flow.wait())``: recognised by the coroutine's code object and its ``self``,
    so no other call of ``wait_first`` is taken for it."""
    frame = getattr(waitable, "cr_frame", None)
    suspend_flow = getattr(consumer, "suspend_flow", None)
    return (
        frame is not None
        and suspend_flow is not None
        and getattr(waitable, "cr_code", None) is getattr(suspend_flow.wait, "__code__", None)
        and frame.f_locals.get("self") is suspend_flow
    )


def replace_consumer_wait_first(wait_first: Callable[..., Awaitable[Any]]) -> None:
    """Put ``wait_first`` on Faust's ``Consumer`` class (every Faust app of the process)."""
    Consumer.wait_first = wait_first  # type: ignore[method-assign, assignment]


# --- streams --------------------------------------------------------------------------------


def close_with_stream(stream: Any, generator: Any) -> None:
    """What Faust's ``@_tracks_buffer_agen`` does for ``take_events``: the stream closes the
    generators in its ``_active_agens`` when it stops, so their ``finally`` runs."""
    stream._active_agens.add(generator)


def enable_passive(stream: Any) -> None:
    """``Stream._enable_passive``: subscribe the stream's channel without an ``async for``
    over the stream, as Faust's ``take_events`` does before it waits for its buffer."""
    stream._enable_passive(stream.channel)


def remove_processor(stream: Any, processor: Callable[..., Any]) -> None:
    """Take back a processor added with ``add_processor`` (Faust has no public remove: its
    ``take_events`` removes from ``_processors`` the same way)."""
    stream._processors.remove(processor)


def compiled_stream_iterator() -> bool:
    """Whether Faust's Cython stream iterator loaded (``faust.streams._CStreamIterator``)."""
    return getattr(faust.streams, "_CStreamIterator", None) is not None


# --- table stores ---------------------------------------------------------------------------


class _PartitionOrigin:
    """Stands in for an event of ``partition``: Faust's stores pick the partition from it."""

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


@contextmanager
def in_partition(partition: int) -> Iterator[None]:
    """Faust's stores take the partition of a key from the current event (the private
    context variable ``faust.streams._current_event``, a weak reference to the event): make
    it one of ``partition``."""
    origin = _PartitionOrigin(partition)
    token = _current_event.set(weakref.ref(origin))  # type: ignore[arg-type]
    try:
        yield
    finally:
        _current_event.reset(token)


PERSISTED_OFFSET_KEY: bytes = RocksDBStore.offset_key
"""Where Faust's RocksDB store keeps, in each partition's database, the last changelog offset
it holds (``Store.offset_key``): read by tools that judge a store from its files."""


def is_memory_store(store: Any) -> bool:
    """Faust's memory store: one dict for every partition, which refuses to change size
    under an iterator."""
    return isinstance(store, MemoryStore)


def is_rocksdict_store(store: Any) -> bool:
    """Faust's RocksDB store on rocksdict (``use_rocksdict``), whose per-partition databases
    the functions below reach."""
    return isinstance(store, RocksDBStore) and bool(store.use_rocksdict)


def active_partitions(table: Any) -> set[int]:
    """The partitions of ``table`` this process is the active writer of: Faust's assignor's
    ``assigned_actives()``, which holds each active table's changelog partitions beside the
    source topics' (the changelog distribution it shares with the group is read from it)."""
    topics = table.changelog_topic.topics
    return {tp.partition for tp in table.app.assignor.assigned_actives() if tp.topic in topics}


def open_partition_dbs(store: Any) -> Mapping[int, Any]:
    """The databases Faust's RocksDB store has open, by partition (``Store._dbs``: those of
    the partitions this worker holds). Empty for any other store."""
    opened: Mapping[int, Any] | None = getattr(store, "_dbs", None)
    return opened or {}


def partition_db(store: Any, partition: int) -> Any:
    """The database of ``partition``, opened if it is not yet (``Store._db_for_partition``):
    written directly with a write batch, as Faust's recovery applies its changelog."""
    return store._db_for_partition(partition)


def table_dirs(data_dir: Path) -> list[Path]:
    """Faust's table directories under an app's datadir: its ``app.conf.tabledir`` is
    ``<datadir>/v<app version>/tables``."""
    return sorted(data_dir.glob("v*/tables"))


def partition_path(tables_dir: Path, table: str, partition: int) -> Path:
    """Where Faust's RocksDB store keeps a table partition (``Store.partition_path``)."""
    return tables_dir / f"{table}-{partition}.db"


def partition_stores(tables_dir: Path, table: str | None = None) -> Iterator[tuple[str, int, Path]]:
    """Each table partition's RocksDB under ``tables_dir`` (of ``table`` only, if given), as
    (table, partition, path), read from :func:`partition_path`'s names."""
    for path in sorted(tables_dir.glob(f"{table or '*'}-*.db")):
        name, _, partition = path.name.removesuffix(".db").rpartition("-")
        if partition.isdigit() and table in (None, name):
            yield name, int(partition), path


StoreOptions = RocksDBOptions
"""Faust's options for one RocksDB (``faust.stores.rocksdb.RocksDBOptions``): the settings a
table's ``options`` give (``max_open_files``, ``write_buffer_size``,
``target_file_size_base``, ``max_write_buffer_number``, ``bloom_filter_size``...) and its
``open``. On the rocksdict path Faust opens each database with the rocksdict ``Options``
its ``as_options`` builds: a subclass that overrides it opens them otherwise."""

StoreMisconfigured = ImproperlyConfigured
"""What Faust raises for a store it cannot open as configured (``ImproperlyConfigured``)."""


class RocksDictStore(RocksDBStore):
    """Faust's RocksDB store on rocksdict, whose databases open with the options
    :meth:`database_options` builds from the table's ``options``: Faust's
    ``Store.__init__`` keeps those in ``self.options`` (less the keys it pops) and opens
    every partition's database with ``self.rocksdb_options``, replaced here once it has
    run."""

    def __init__(
        self,
        url: str | URL,
        app: AppT,
        table: CollectionT,
        *,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, app, table, options=options, **kwargs)
        # Copied, not popped from: Faust's store pops from the table's own options dict,
        # and a second store of the same table must find them there too.
        opened_with = self.database_options(dict(self.options or {}))
        if not is_rocksdict_store(self):
            raise StoreMisconfigured(f"{self.url.scheme} runs on rocksdict only")
        self.rocksdb_options = opened_with

    def database_options(self, options: dict[str, Any]) -> StoreOptions:
        """Override: the options every database of this store opens with, from the table's
        ``options``; raise :data:`StoreMisconfigured` for options it cannot open with."""
        raise NotImplementedError


def register_store(scheme: str, path: str) -> None:
    """Make ``<scheme>:`` store URLs open the store class at ``path`` (``module:Class``):
    Faust resolves a table's store URL by its scheme in ``faust.stores.STORES.aliases``."""
    STORES.aliases[scheme] = path


# --- the worker and its web server ----------------------------------------------------------


def drop_faust_views(app: faust.App) -> None:
    """Drop what Faust would still mount with its views' settings off: its "production
    index" at / (no setting turns it off), and any view a later Faust adds by default. Its
    web blueprints wait, until the server starts, in ``BlueprintManager._enabled``."""
    blueprints = app.web.blueprints
    blueprints._enabled = [
        (prefix, bp)
        for prefix, bp in blueprints._enabled
        if not (isinstance(bp, str) and bp.startswith("faust."))
    ]


class SignalHookedWorker(faust.Worker):
    """Faust's worker, calling :meth:`before_signal` first when SIGTERM or SIGINT arrives:
    mode's ``Worker`` installs ``_on_sigterm`` and ``_on_sigint`` as the loop's handlers."""

    def before_signal(self, signum: int) -> None:
        """Override: what to do before mode stops the worker."""

    def _on_sigterm(self) -> None:
        self.before_signal(signal.SIGTERM)
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self.before_signal(signal.SIGINT)
        super()._on_sigint()


FAUST_VERIFY_ALL = Consumer.verify_all_partitions_active
"""Faust's livelock detector's check, as it was before :func:`quiet_faust_livelock_detector`."""
FAUST_VERIFY_RECOVERY = ThreadDelegateConsumer.verify_recovery_event_path
"""The same check of a changelog partition, which Faust's recovery makes while it reads."""


async def _judge_nothing(self: Any) -> None:
    """No partition judged: see :func:`quiet_faust_livelock_detector`."""


def _judge_no_partition(self: Any, now: float, tp: TP) -> None:
    """This partition not judged: see :func:`quiet_faust_livelock_detector`."""


def quiet_faust_livelock_detector() -> None:
    """Turn Faust's livelock detector's checks off: every Faust consumer of the process.

    Its task (``Consumer._commit_livelock_detector``) calls ``verify_all_partitions_active``
    every 2.5 commit intervals, outside rebalances, and logs an ERROR per partition that has
    no Kafka-committed offset for a while, or no fetch or no processed record since the
    *worker's* start. The worker's positions are in its tables (not Kafka's committed
    offsets), and a partition handed over an hour after the start is read from its
    changelogs first: the errors came in the hundreds with nothing wrong. Its recovery
    (``Recovery._verify_remaining``) makes the same fetch check of each changelog partition
    it reads, timed from the worker's start too: off as well (the recovery's own warnings,
    timed from the recovery's start, stay). The worker's own check is
    services/worker/stalls.py."""
    Consumer.verify_all_partitions_active = _judge_nothing  # type: ignore[method-assign]
    ThreadDelegateConsumer.verify_recovery_event_path = _judge_no_partition  # type: ignore[method-assign]
