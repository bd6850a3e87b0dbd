"""What a batch consumer reaches Kafka through: the app's producer and consumer, and a probe
of its own for seeks over gaps."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.types import TP

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.tracing import Headers
from services.worker.faust_seam import seek_and_wait, send_record
from services.worker.membership import Membership


class KafkaPorts:
    """The runner's ``send``, ``send_to`` and ``seek`` over one Faust app, and its
    :class:`OffsetProbe`. Nothing is sent while ``membership`` is in doubt (a frozen
    process may have lost its partitions: :mod:`services.worker.membership`)."""

    def __init__(
        self, app: faust.App, settings: Settings, membership: Membership | None = None
    ) -> None:
        self.app = app
        self.membership = membership or Membership(settings.session_timeout_s)
        self.probe = OffsetProbe(settings)
        app.on_before_shutdown.connect(self.probe.close_on_signal)

    async def send(
        self, topic_name: str, key: bytes, value: bytes, headers: Headers | None = None
    ) -> Any:
        self.membership.check()
        return await send_record(self.app, topic_name, key, value, None, headers)

    async def send_to(
        self, topic_name: str, key: bytes, value: bytes | None, partition: int
    ) -> Any:
        self.membership.check()
        return await send_record(self.app, topic_name, key, value, partition)

    async def seek(self, topic_name: str, partition: int, offset: int) -> None:
        await seek_and_wait(self.app, {TP(topic_name, partition): offset})


class OffsetProbe:
    """Asks the broker where records really are, when a seek back over a gap must know
    whether the offsets it misses exist (retention and transaction markers leave holes).
    A consumer of its own, outside the group, started on first use (gaps are rare)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        # One question at a time: a seek back and the stall check (stalls.py) both ask,
        # and each assigns, seeks and reads the one consumer.
        self._asking = asyncio.Lock()

    async def first_at_or_after(self, topic: str, partition: int, offset: int) -> int | None:
        async with self._asking:
            return await self._first_at_or_after(topic, partition, offset)

    async def _first_at_or_after(self, topic: str, partition: int, offset: int) -> int | None:
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
