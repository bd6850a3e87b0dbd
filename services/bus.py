"""Send commands to Kafka from outside the worker (REST API, CLI, benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from opentelemetry.trace import Tracer

from runtime import tracing
from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from sagas.messages import Envelope


@dataclass(frozen=True)
class Position:
    """Where a record landed: its effects are projected once the projector passes it."""

    topic: str
    partition: int
    offset: int


class CommandBus:
    """An idempotent, acks=all producer: a retry can neither duplicate nor reorder a command.

    One per API process, shared by all its requests: their sends go into the producer's
    per-partition batches together, and one produce request carries many commands."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Set when the process turned tracing on (runtime/tracing.py); None: no span, no
        # header on a command.
        self._tracer = tracing.active()
        self._producer = AIOKafkaProducer(
            **aiokafka_options(settings),
            enable_idempotence=True,
            acks="all",
            # Concurrent requests' commands share produce requests: each waits up to the
            # linger for others (settings; chosen by benchmarks/bench_api.py).
            linger_ms=settings.api_producer_linger_ms,
            max_batch_size=settings.api_producer_max_batch_bytes,
            request_timeout_ms=10_000,
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            raise await unreachable(self.settings, exc) from exc

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, channel: str, envelope: Envelope) -> Position:
        """Send and wait for the broker's acknowledgement."""
        topic = self.settings.topic(channel)
        if self._tracer is None:
            meta = await self._producer.send_and_wait(
                topic, envelope.encode(), key=envelope.key.encode()
            )
        else:
            meta = await self._send_traced(self._tracer, topic, envelope)
        return Position(topic, meta.partition, meta.offset)

    async def _send_traced(self, tracer: Tracer, topic: str, envelope: Envelope) -> Any:
        """A send span, child of the request's, whose context the command carries.

        Not opentelemetry-instrumentation-aiokafka: it patches ``AIOKafkaProducer.send`` and
        the consumer's fetches for the whole process, so the worker's Faust clients (every
        changelog write, every fetch of a batch) and the projector's consumer would pay for
        spans too; the one send that starts a saga's trace is made here instead."""
        with tracing.sending(tracer, topic, envelope.key, envelope.message_id) as headers:
            return await self._producer.send_and_wait(
                topic, envelope.encode(), key=envelope.key.encode(), headers=headers
            )

    async def send_many(self, items: list[tuple[str, Envelope]]) -> list[Position]:
        """Send a batch, then wait for all acknowledgements (fast path for benchmarks and
        loaders). With tracing on each command has a send span of its own, as with
        :meth:`send`, ended once the producer holds the record (the batch's acknowledgements
        are awaited together after)."""
        futures = []
        for channel, envelope in items:
            topic = self.settings.topic(channel)
            futures.append((topic, await self._enqueue(topic, envelope)))
        positions = []
        for topic, fut in futures:
            meta = await fut
            positions.append(Position(topic, meta.partition, meta.offset))
        return positions

    async def _enqueue(self, topic: str, envelope: Envelope) -> Any:
        """Hand one command to the producer; its delivery future."""
        value, key = envelope.encode(), envelope.key.encode()
        if self._tracer is None:
            return await self._producer.send(topic, value, key=key)
        with tracing.sending(self._tracer, topic, envelope.key, envelope.message_id) as headers:
            return await self._producer.send(topic, value, key=key, headers=headers)
