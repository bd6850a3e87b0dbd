"""The Debezium ingest edge: Debezium's legacy topics in, the correlator's commands out.

Thin: each record is decoded and re-keyed by :mod:`sagas.legacy_ingest` (pure), an
unreadable one is dead-lettered with its reason and the stream goes on, tombstones and
BEGIN records are passed over, and the rest are sent to the correlator's topic
(``legacy-tx``) keyed by correlation key.

**At-least-once, the source position stored only after the sends are acknowledged**, as
the process runner does (:mod:`services.worker.runner`) and for the same reasons: the
position of each Debezium partition lives in this edge's own table (``legacy-ingest-state``,
partitioned like the Debezium topics so a partition and its position are assigned to the
same worker), written after every send of the batch was acknowledged by Kafka, and the
consumer is sought to it after every assignment. Faust's committed offset is not used:
Faust acks a batch's events even when their handler raised and has moved its offsets past
unprocessed records across rebalances, so committing it would skip changes after a crash.
A crash between the sends and the store re-reads those records and sends them again with
the same message ids (they derive from the change's position), and the correlator drops the
copies: the legacy action is still one business event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry.trace import SpanKind, Tracer

from runtime.tracing import Headers, inject_headers
from sagas.legacy_ingest import change_envelope, marker_envelope
from sagas.messages import Envelope
from sagas.untrusted import ContractError
from services.worker.deadletter import DEFAULT_INLINE_MAX_BYTES, DeadLetter
from services.worker.metrics import Metrics
from services.worker.positions import InputPositions, Rewind
from services.worker.runner import (
    FirstOffset,
    Incoming,
    Seek,
    Send,
    Table,
    _cannot_tell,
    _no_seek,
    count_skipped,
    positions_to_store,
    rewind,
)

log = logging.getLogger(__name__)


@dataclass
class DebeziumIngest:
    name: str
    """The agent's name (``legacy-ingest``): stage of its dead letters, key of its metrics."""
    table_topics: tuple[str, ...]
    """``<prefix>.school.<table>`` for each legacy table."""
    transaction_topic: str
    correlator_topic: str
    table: Table
    send: Send
    dead_letter_topic: str
    metrics: Metrics
    seek: Seek = _no_seek
    first_offset: FirstOffset = _cannot_tell
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    monotonic: Callable[[], float] = time.monotonic
    deadletter_inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    tracer: Tracer | None = None
    """With tracing on: a span per change record (Debezium sends no trace context, so each
    starts a trace), whose context the correlator's command carries."""
    positions: InputPositions = field(init=False)

    def __post_init__(self) -> None:
        self.positions = InputPositions(self.table.load_position)

    @property
    def input_topics(self) -> tuple[str, ...]:
        return (*self.table_topics, self.transaction_topic)

    async def handle_batch(self, batch: Sequence[Incoming]) -> None:
        """Process a batch; when it raises, nothing of it was stored and it may be retried."""
        plan = self.positions.plan(batch, self.monotonic())
        outbound: list[tuple[Envelope, Headers | None]] = []
        dead: list[DeadLetter] = []
        now = self.clock()
        for record in plan.admitted(batch):
            if self.tracer is None:
                envelope, headers = self._translate(record, now, dead), None
            else:
                envelope, headers = self._translate_traced(self.tracer, record, now, dead)
            if envelope is not None:
                outbound.append((envelope, headers))
        futures = [await self._send_command(env, headers) for env, headers in outbound]
        futures += [await self.send(self.dead_letter_topic, d.key or b"", d.encode()) for d in dead]
        await asyncio.gather(*futures)  # every send acknowledged before the positions move
        await self.table.write([], positions_to_store(plan, batch))
        count_skipped(self.metrics, self.name, plan)
        self.positions.commit(plan)
        await self._rewind(plan.rewinds)
        self.metrics.inc(self.name, "batches")
        self.metrics.inc(self.name, "records", len(batch))
        self.metrics.inc(self.name, "sent", len(outbound))
        self.metrics.inc(self.name, "dead_lettered", len(dead))

    async def reseek_overdue(self) -> None:
        """Ask again for the seeks back whose expected offset has not come (positions.py)."""
        await self._rewind(self.positions.overdue(self.monotonic()))

    async def _rewind(self, rewinds: Sequence[Rewind]) -> None:
        await rewind(rewinds, self.name, self.positions, self.seek, self.first_offset, self.metrics)

    async def _send_command(self, envelope: Envelope, headers: Headers | None) -> Any:
        key, value = envelope.key.encode(), envelope.encode()
        if headers is None:
            return await self.send(self.correlator_topic, key, value)
        return await self.send(self.correlator_topic, key, value, headers)

    def _translate_traced(
        self, tracer: Tracer, record: Incoming, now: datetime, dead: list[DeadLetter]
    ) -> tuple[Envelope | None, Headers | None]:
        """:meth:`_translate` in the change record's span, a root: Debezium sends no context."""
        with tracer.start_as_current_span(
            f"{self.name} {record.topic}", kind=SpanKind.CONSUMER
        ) as span:
            envelope = self._translate(record, now, dead)
            if span.is_recording():
                span.set_attributes(
                    {
                        "messaging.system": "kafka",
                        "messaging.operation.type": "process",
                        "messaging.destination.name": record.topic,
                        "messaging.destination.partition.id": str(record.partition),
                        "messaging.kafka.offset": record.offset,
                        "sagaline.message.type": "" if envelope is None else envelope.type,
                    }
                )
            return envelope, tuple(inject_headers())

    def _translate(
        self, record: Incoming, now: datetime, dead: list[DeadLetter]
    ) -> Envelope | None:
        try:
            if record.topic == self.transaction_topic:
                envelope = marker_envelope(record.value, now)
            else:
                envelope = change_envelope(record.value)
        except ContractError as exc:
            self.metrics.inc(self.name, "invalid")
            log.warning("%s: dead-lettering %s@%s: %s", self.name, record.topic, record.offset, exc)
            dead.append(self._letter(record, str(exc)))
            return None
        except Exception as exc:  # never die silently on a strange record: park it, go on
            self.metrics.inc(self.name, "errors")
            log.exception("%s: failed on %s@%s", self.name, record.topic, record.offset)
            dead.append(self._letter(record, f"{type(exc).__name__}: {exc}"))
            return None
        if envelope is None:
            self.metrics.inc(self.name, "passed_over")  # a tombstone or a BEGIN record
        return envelope

    def _letter(self, record: Incoming, reason: str) -> DeadLetter:
        return DeadLetter.of(record, reason, self.name, self.deadletter_inline_max_bytes)
