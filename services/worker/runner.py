"""The one agent body every saga and participant runs.

For each batch of records: decide each against the freshest state for its key (earlier
records of the same batch included), send every outbound message and wait until Kafka has
acknowledged all of them, and only then store the new states. A crash before the store
replays the batch on the old states, which re-creates the very same messages (ids and
sequence numbers derive from their cause), and consumers drop the copies. A crash after
the store finds the ids in the dedupe window: nothing is decided twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from sagas.machinery.process import Outbound, Process
from sagas.machinery.record import Record
from sagas.machinery.step import StepResult, step
from sagas.messages import ContractError, Envelope
from services.worker.deadletter import DeadLetter
from services.worker.deadlines import DeadlineIndex
from services.worker.metrics import Metrics

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes], Awaitable[Awaitable[Any]]]
"""Queue ``value`` under ``key`` on a topic; the awaited result is the delivery future."""


@dataclass(frozen=True)
class Incoming:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    origin: Any = None
    """The Faust event it came from: table reads and writes for its key use its partition."""


class Table(Protocol):
    """Per-key state storage; ``origin`` tells a partitioned store where the key lives."""

    def load(self, key: str, origin: Any) -> bytes | None: ...

    def store(self, key: str, value: bytes, origin: Any) -> None: ...


class DictTable(dict[str, bytes]):
    """An in-memory :class:`Table`, for tests and tools."""

    def load(self, key: str, origin: Any) -> bytes | None:
        return self.get(key)

    def store(self, key: str, value: bytes, origin: Any) -> None:
        self[key] = value


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

    def __post_init__(self) -> None:
        self._codec = Record.codec(self.process.state_type)

    def rebuild_deadlines(self, items: Iterable[tuple[str, bytes]], monotonic_now: float) -> None:
        """Re-index the deadlines of every key this worker's table holds."""
        entries = ((k, self._codec.model_validate_json(raw).next_deadline()) for k, raw in items)
        self.deadlines.rebuild(entries, monotonic_now)

    def load(self, key: str, origin: Any = None) -> Record[Any] | None:
        raw = self.table.load(key, origin)
        return None if raw is None else self._codec.model_validate_json(raw)

    async def handle_batch(self, batch: Sequence[Incoming]) -> None:
        fresh: dict[str, Record[Any]] = {}
        origins: dict[str, Any] = {}
        outbound: list[Outbound] = []
        dead: list[DeadLetter] = []
        now = self.clock()
        started = time.perf_counter()
        for record in batch:
            result = self._decide(record, fresh, now, dead)
            if result is not None and result.result.changed:
                fresh[result.record_key] = result.result.record
                origins[result.record_key] = record.origin
                outbound.extend(result.result.outbound)
        decided = time.perf_counter()
        await self._publish(outbound, dead)
        published = time.perf_counter()
        for key, rec in fresh.items():
            self.table.store(key, rec.encode(), origins[key])
            self.deadlines.schedule(key, rec.next_deadline())
        name = self.process.name
        self.metrics.inc(name, "batches")
        self.metrics.inc(name, "records", len(batch))
        self.metrics.add_time(name, "decide", decided - started)
        self.metrics.add_time(name, "publish", published - decided)
        self.metrics.add_time(name, "store", time.perf_counter() - published)

    def _decide(
        self,
        incoming: Incoming,
        fresh: dict[str, Record[Any]],
        now: datetime,
        dead: list[DeadLetter],
    ) -> _Decided | None:
        name = self.process.name
        try:
            envelope = Envelope.decode(incoming.value)
            key = envelope.key
            # The record's key chose the partition, hence the table partition the state lives
            # in: a record without one, or with another key than its envelope's, would read
            # and write the state of a key this partition does not own.
            if incoming.key is None:
                raise ContractError(f"record has no key (envelope key {key!r})")
            if incoming.key != key.encode():
                shown = incoming.key[:60].decode(errors="replace")
                raise ContractError(f"record key {shown!r} differs from envelope key {key!r}")
            current = fresh.get(key) or self.load(key, incoming.origin)
            result = step(self.process, current, envelope, now, self.seen_window)
        except ContractError as exc:
            self.metrics.inc(name, "invalid")
            log.warning("%s: dead-lettering %s@%s: %s", name, incoming.topic, incoming.offset, exc)
            dead.append(DeadLetter.of(incoming, str(exc), name))
            return None
        except Exception as exc:  # an agent must never die silently: park the record, go on
            self.metrics.inc(name, "errors")
            log.exception("%s: failed on %s@%s", name, incoming.topic, incoming.offset)
            dead.append(DeadLetter.of(incoming, f"{type(exc).__name__}: {exc}", name))
            return None
        self.metrics.inc(name, "duplicates" if result.duplicate else "processed")
        return _Decided(key, result)

    async def _publish(self, outbound: list[Outbound], dead: list[DeadLetter]) -> None:
        futures = [
            await self.send(self.topic_for(o.channel), o.envelope.key.encode(), o.envelope.encode())
            for o in outbound
        ]
        futures.extend(
            [await self.send(self.dead_letter_topic, d.key or b"", d.encode()) for d in dead]
        )
        # Wait for every acknowledgement before the states are stored (see module doc).
        await asyncio.gather(*futures)
        self.metrics.inc(self.process.name, "sent", len(outbound))
        self.metrics.inc(self.process.name, "dead_lettered", len(dead))


@dataclass(frozen=True)
class _Decided:
    record_key: str
    result: StepResult
