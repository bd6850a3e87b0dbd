"""Follow the domain-event topic: how demo, tests and benchmarks see saga outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, topic_partitions
from sagas.catalog import SAGA_TYPES
from sagas.contracts.orders import FINAL_STATUSES, OrderStatusChanged
from sagas.messages import ContractError, Envelope


@dataclass
class Outcome:
    status: str
    reason: str | None
    at: float
    """Monotonic time when this process saw it."""
    written_at: float
    """When the worker wrote it (the record's timestamp, wall clock, seconds): unlike ``at``,
    not delayed by this process's polling or a queue in front of it."""


@dataclass
class EventTail:
    """Reads the event topic from the end offsets at :meth:`start` (or the beginning)."""

    settings: Settings
    from_beginning: bool = False
    events: list[Envelope] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    """The first final status of every order, by order id."""
    statuses: dict[str, Outcome] = field(default_factory=dict)
    """The latest status of every saga of every declared type, by its entity key
    (``enrollment:e-1``); a saga's status events share its partition, so they come in order."""

    keeps_events = True
    """Keep every event read in :attr:`events` (False: only statuses and outcomes)."""

    async def start(self) -> None:
        topic = self.settings.topic(EVENTS)
        self._consumer = AIOKafkaConsumer(
            **aiokafka_options(self.settings), enable_auto_commit=False
        )
        await self._consumer.start()
        tps = await topic_partitions(self._consumer, topic)
        self._consumer.assign(tps)
        if self.from_beginning:
            await self._consumer.seek_to_beginning(*tps)
        else:
            for tp, offset in (await self._consumer.end_offsets(tps)).items():
                self._consumer.seek(tp, offset)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self._consumer.stop()
        except asyncio.CancelledError:
            # aiokafka's fetcher.close() lets out the cancellation of a fetch that was
            # backing off after a broker timeout (seen with 512 KiB records on a loaded
            # broker); only a cancellation of this task itself goes on.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    try:
                        envelope = Envelope.decode(record.value)
                    except ContractError:
                        continue
                    if self.keeps_events:
                        self.events.append(envelope)
                    self._note_outcome(envelope, loop.time(), record.timestamp / 1000)

    def _note_outcome(self, envelope: Envelope, at: float, written_at: float) -> None:
        saga = _BY_ENTITY_TYPE.get(envelope.key.partition(":")[0])
        if saga is not None and envelope.type in _STATUS_EVENTS:
            status = saga.statuses.announced(envelope.type, envelope.payload)
            if status is not None:
                reason = envelope.payload.get("reason")
                why = reason if isinstance(reason, str) else None
                self.statuses[envelope.key] = Outcome(status, why, at, written_at)
        if envelope.type != OrderStatusChanged.TYPE or envelope.saga_id is None:
            return
        change = OrderStatusChanged.model_validate(envelope.payload)
        if change.status in FINAL_STATUSES and envelope.saga_id not in self.outcomes:
            self.outcomes[envelope.saga_id] = Outcome(change.status, change.reason, at, written_at)

    async def wait_for(self, order_ids: Iterable[str], timeout: float) -> dict[str, Outcome]:
        """Outcomes of ``order_ids``; returns what arrived when ``timeout`` runs out."""
        wanted = set(order_ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and not wanted <= self.outcomes.keys():
            await asyncio.sleep(0.05)
        return {i: self.outcomes[i] for i in wanted if i in self.outcomes}

    async def wait_settled(self, saga_keys: Iterable[str], timeout: float) -> dict[str, Outcome]:
        """The latest statuses of ``saga_keys`` once all are settled (as their saga types
        declare), or whatever they are when ``timeout`` runs out."""
        wanted = set(saga_keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and not all(self.is_settled(k) for k in wanted):
            await asyncio.sleep(0.05)
        return {k: self.statuses[k] for k in wanted if k in self.statuses}

    def is_settled(self, saga_key: str) -> bool:
        outcome = self.statuses.get(saga_key)
        saga = _BY_ENTITY_TYPE.get(saga_key.partition(":")[0])
        return outcome is not None and saga is not None and saga.is_settled(outcome.status)

    def events_of(self, entity_key: str) -> list[Envelope]:
        return [e for e in self.events if e.key == entity_key]


# Status events and the facts that start a saga (they say its first status by themselves).
_STATUS_EVENTS = frozenset(
    m.TYPE for t in SAGA_TYPES for m in (t.statuses.event, t.statuses.start) if m is not None
)
_BY_ENTITY_TYPE = {t.entity_type: t for t in SAGA_TYPES}
