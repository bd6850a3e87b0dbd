"""Partitions and end offsets of a topic, asked of the broker (for lag and catch-up checks)."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import topic_partitions

log = logging.getLogger(__name__)


class EndOffsets:
    """A group-less consumer that only asks for end offsets; started on first use, so the
    API starts even while the broker is away."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def get(self, topic: str) -> dict[int, int] | None:
        """Partition -> end offset, or None when the broker cannot be asked."""
        try:
            consumer = await self._started()
            partitions = await topic_partitions(consumer, topic)
            ends = await consumer.end_offsets(partitions) if partitions else {}
        except (KafkaError, OSError) as exc:
            log.warning("cannot read end offsets of %s: %s", topic, exc)
            return None
        return {tp.partition: offset for tp, offset in ends.items()}

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def _started(self) -> AIOKafkaConsumer:
        async with self._lock:
            if self._consumer is None:
                consumer = AIOKafkaConsumer(
                    **aiokafka_options(self._settings),
                    enable_auto_commit=False,
                    request_timeout_ms=5_000,
                )
                await consumer.start()
                self._consumer = consumer
            return self._consumer
