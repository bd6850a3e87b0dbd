"""Fault injection: kill, stop and restart the processes, and write poison records.

Process faults run one at a time (each waits until what it broke is back) in a thread, so
the load keeps running meanwhile. A supervisor restarts a service that died on its own
(not by a fault) and records it as an incident.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from aiokafka.structs import RecordMetadata

from faults.poison import PoisonRecord, build
from faults.procs import ABORT, Broker, Service
from faults.procs import pause as pause_unless_aborted
from faults.stack import SESSION_TIMEOUT_S, Stack
from faults.stores import Mismatch, Unreadable, recovery_mismatches
from runtime.settings import Settings
from runtime.topics import table_name
from sagas.catalog import channel as catalog_channel
from sagas.catalog import running_channels
from sagas.machinery.record import Record
from services.worker.faust_seam import partition_stores, table_dirs

PROCESS_FAULTS = ("kill-worker", "kill-projector", "kill-api", "stop-worker", "kill-broker")
WORKER_FAULTS = ("kill-worker", "stop-worker")


def pick_worker(kind: str, workers: int, rng: random.Random) -> int | None:
    """Which of ``workers`` worker processes a worker fault hits (its index, drawn uniformly
    from ``rng``); None, drawing nothing, for a fault of another kind."""
    if kind not in WORKER_FAULTS:
        return None
    return rng.randrange(workers)


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float
    """Seconds since the load started."""
    detail: str


@dataclass(frozen=True)
class Incident:
    """A service that exited although no fault killed it."""

    service: str
    exit_code: int | None
    log: str
    at: float


class Deck:
    """Deals kinds in shuffled rounds, so every kind comes up about equally often in a run."""

    def __init__(self, kinds: tuple[str, ...], rng: random.Random) -> None:
        self.kinds = kinds
        self.rng = rng
        self.cards: list[str] = []

    def deal(self) -> str:
        if not self.cards:
            self.cards = list(self.kinds)
            self.rng.shuffle(self.cards)
        return self.cards.pop()

    def put_back(self, kind: str) -> None:
        self.cards.append(kind)


@dataclass
class Injector:
    stack: Stack
    broker: Broker
    rng: random.Random
    clock: Callable[[], float]
    faults: list[Fault] = field(default_factory=list)
    poisons: list[PoisonRecord] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    store_mismatches: list[tuple[str, str]] = field(default_factory=list)
    """After a worker SIGKILL: (worker, key) for each key its table stores would recover
    differently from their changelogs (see faults/stores.py); each one is a violation."""
    broker_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _producer: AIOKafkaProducer | None = None
    _poison_count: int = 0

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.broker.bootstrap,
            max_request_size=4 * 1024 * 1024,
            acks="all",
            request_timeout_ms=30_000,
        )
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            # The broker may be down: do not hang the cleanup on a flush.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._producer.stop(), 10)

    # --- process faults ---------------------------------------------------------------

    async def process_fault(self, kind: str, worker: int | None = None) -> None:
        """``worker``: which worker a worker fault hits (:func:`pick_worker`; the first if
        not given)."""
        at = self.clock()
        if kind == "kill-broker":
            # No poison record is written while the broker is down: a send that failed
            # half-way could land at an offset the harness never learnt.
            async with self.broker_lock:
                detail = await asyncio.to_thread(self._process_fault, kind, worker)
        else:
            detail = await asyncio.to_thread(self._process_fault, kind, worker)
        self.faults.append(Fault(kind, at, detail))

    def _process_fault(self, kind: str, index: int | None) -> str:
        stack = self.stack
        target = stack.workers[index or 0]
        who = f"{target.name}: " if len(stack.workers) > 1 else ""
        match kind:
            case "kill-worker":
                return who + self._kill_restart(
                    target,
                    lambda: stack.start(target.name),
                    1.0,
                    3.0,
                    lambda: self._check_worker_stores(target),
                )
            case "kill-projector":
                return self._kill_restart(stack.projector, stack.start_projector, 0.5, 2.0)
            case "kill-api":
                return self._kill_restart(stack.api, stack.start_api, 0.5, 2.0)
            case "stop-worker":
                worker = target
                pid = worker.pid
                pause = SESSION_TIMEOUT_S + self.rng.uniform(2.0, 6.0)
                worker.expected_down = True
                worker.signal(signal.SIGSTOP)
                pause_unless_aborted(pause)
                worker.signal(signal.SIGCONT)
                worker.expected_down = False
                return f"{who}SIGSTOP pid {pid} for {pause:.1f} s, then SIGCONT"
            case "kill-broker":
                down = self.rng.uniform(5.0, 30.0)
                broker_pid = self.broker.pid()
                self.broker.sigkill()
                if not pause_unless_aborted(down):
                    return f"SIGKILL broker pid {broker_pid}; run aborted while it was down"
                started = time.monotonic()
                self.broker.start()
                return (
                    f"SIGKILL broker pid {broker_pid}, down {down:.1f} s, "
                    f"restart took {time.monotonic() - started:.1f} s"
                )
        raise ValueError(f"unknown fault {kind!r}")

    def _kill_restart(
        self,
        service: Service,
        restart: Callable[[], bool],
        low: float,
        high: float,
        while_down: Callable[[], str] | None = None,
    ) -> str:
        pid = service.pid if service.alive() else None
        service.sigkill()
        killed = time.monotonic()
        down = self.rng.uniform(low, high)
        checked = f"; {while_down()}" if while_down is not None else ""
        if not pause_unless_aborted(max(0.0, down - (time.monotonic() - killed))):
            return f"SIGKILL pid {pid}; run aborted before the restart"
        down = time.monotonic() - killed
        started = time.monotonic()
        ready = restart()
        took = time.monotonic() - started
        state = f"back in {took:.1f} s" if ready else f"NOT ready after {took:.1f} s"
        return f"SIGKILL pid {pid}, down {down:.1f} s, restarted ({state}){checked}"

    def _check_worker_stores(self, worker: Service) -> str:
        """Recover the dead worker's tables the way Faust will (its local RocksDB, opened
        read-only, plus the changelogs) and compare them with the changelogs: every table
        partition it holds a store of (active or standby, now or before a rebalance)."""
        settings = self.stack.worker_settings[worker.name]
        dirs = table_dirs(settings.data_dir)
        if not dirs:
            return "no table store yet"
        held = sorted({partition for _, partition, _ in partition_stores(dirs[0])})
        try:
            found = asyncio.run(_all_mismatches(settings, dirs[0]))
        except Exception as exc:  # the harness must go on; the check could not run
            return f"store check failed to run ({type(exc).__name__}: {exc})"
        self.store_mismatches.extend((worker.name, str(m)) for m in found)
        return (
            f"store check of partitions {held}: {len(found)} key(s) would recover unlike "
            "their changelog"
        )

    def check_every_worker_store(self) -> str:
        """At a cycle's end, every worker's table stores, standbys' included, judged the way
        the store check judges a killed worker's: the workers are frozen together (SIGSTOP:
        none writes while its files and the changelogs are read; a frozen writer is a dead
        one to a read-only open), each one's stores recovered as Faust would and compared
        with the changelogs, then thawed. A standby whose persisted offset ran ahead of its
        store (a dropped fetch, RELIABILITY.md) shows here even if no promotion used it."""
        alive = [w for w in self.stack.workers if w.alive()]
        for worker in alive:
            worker.signal(signal.SIGSTOP)
        try:
            return "; ".join(f"{w.name}: {self._check_worker_stores(w)}" for w in alive)
        finally:
            for worker in alive:
                worker.signal(signal.SIGCONT)

    # --- poison -------------------------------------------------------------------------

    async def poison(self, kind: str, channel: str) -> PoisonRecord:
        assert self._producer is not None
        self._poison_count += 1
        key, value, expect = build(kind, channel, self._poison_count)
        topic = self.stack.settings.topic(channel)
        partition = self.rng.randrange(self.stack.settings.partitions)
        async with self.broker_lock:
            meta = await self._send(topic, value, key, partition)
        record = PoisonRecord(kind, channel, topic, meta.partition, meta.offset, expect)
        self.poisons.append(record)
        self.faults.append(
            Fault(f"poison:{kind}", self.clock(), f"{topic}[{meta.partition}]@{meta.offset}")
        )
        return record

    async def _send(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int
    ) -> RecordMetadata:
        """Send once; retry only failures that happen before the record is queued (metadata
        of a broker that just restarted), so a poison record is never written twice."""
        assert self._producer is not None
        for attempt in range(60):
            try:
                future = await self._producer.send(topic, value, key=key, partition=partition)
            except (UnknownTopicOrPartitionError, KafkaConnectionError):
                await asyncio.sleep(min(0.2 * (attempt + 1), 2.0))
                continue
            meta: RecordMetadata = await future
            return meta
        raise RuntimeError(f"could not write a poison record to {topic}[{partition}]")

    # --- supervision --------------------------------------------------------------------

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart a service that died on its own; a killed one is the fault's to restart."""
        last_restart: dict[str, float] = {}
        while not stop.is_set() and not ABORT.is_set():
            for service in self.stack.services:
                if service.alive() or service.expected_down or service.proc is None:
                    continue
                if time.monotonic() - last_restart.get(service.name, 0.0) < 3.0:
                    continue
                last_restart[service.name] = time.monotonic()
                self.incidents.append(
                    Incident(service.name, service.exit_code(), str(service.log), self.clock())
                )
                await asyncio.to_thread(self.stack.start, service.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def _all_mismatches(settings: Settings, tables_dir: Path) -> list[Mismatch | Unreadable]:
    """Every table of a process the worker runs (the others have no store to compare); each
    recovered record must decode, a retired key's marker included."""
    found: list[Mismatch | Unreadable] = []
    for channel in running_channels(settings.cdc_enabled):
        declared = catalog_channel(channel)
        # A definition's state type is a dataclass field's default: read it off the class.
        state_type: Any = getattr(declared.definition, "state_type", None) if declared else None
        codec = Record.codec(state_type) if state_type is not None else None
        found += await recovery_mismatches(
            settings.kafka_bootstrap, tables_dir, settings.app_id, table_name(channel), codec
        )
    return found
