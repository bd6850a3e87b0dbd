"""The handover's last step: events the online projector applied while the rebuild ran.

The projector keeps its position in memory between batches (it re-reads its checkpoints only
at start and after a failed batch). At the swap its position equals the checkpoints it last
committed, which may be past the rebuild's end offsets. Those events are applied to the
rebuilt models with the projector's own :func:`~readside.batch.apply_batch`, in
the swap's transaction, so the swapped-in models and checkpoints stand exactly where the
projector's next batch starts: nothing applied twice, nothing skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition
from sqlalchemy import Connection

from readside.batch import Batch, apply_batch
from readside.triage import Positioned, Rejected, triage
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def ranges(ends: Mapping[int, int], checkpoints: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets the projector applied past the rebuild's ends."""
    return {p: (ends.get(p, 0), o) for p, o in sorted(checkpoints.items()) if o > ends.get(p, 0)}


async def fetch(
    settings: Settings, topic: str, wanted: Mapping[int, tuple[int, int]], timeout_s: float = 60.0
) -> list[Record]:
    """The records in ``wanted`` (partition -> [start, end)), in offset order per partition."""
    if not wanted:
        return []
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        return await asyncio.wait_for(_read(consumer, topic, wanted), timeout_s)
    finally:
        await consumer.stop()


async def _read(
    consumer: AIOKafkaConsumer, topic: str, wanted: Mapping[int, tuple[int, int]]
) -> list[Record]:
    tps = {TopicPartition(topic, p): span for p, span in wanted.items()}
    consumer.assign(list(tps))
    for tp, (start, _) in tps.items():
        consumer.seek(tp, start)
    found: list[Record] = []
    pending = set(tps)
    while pending:
        for tp, batch in (await consumer.getmany(*pending, timeout_ms=500)).items():
            end = tps[tp][1]
            found.extend(
                Record(tp.partition, r.offset, r.key, r.value) for r in batch if r.offset < end
            )
            if batch and batch[-1].offset >= end - 1:
                pending.discard(tp)
        pending = {tp for tp in pending if await consumer.position(tp) < tps[tp][1]}
    return found


def apply(
    conn: Connection, topic: str, records: Sequence[Record], ends: Mapping[int, int], now: datetime
) -> int:
    """Apply ``records`` like the projector's next batch would; returns how many."""
    if not records:
        return 0
    events: list[Positioned] = []
    dead = 0
    for record in records:
        verdict = triage(record.key, record.value)
        if isinstance(verdict, Rejected):
            dead += 1  # the projector dead-lettered it already; only the counter moves
        else:
            events.append(Positioned(verdict, record.partition, record.offset))
    next_offsets = dict(ends)
    for record in records:
        next_offsets[record.partition] = max(
            next_offsets.get(record.partition, 0), record.offset + 1
        )
    touched = {r.partition for r in records}
    apply_batch(conn, Batch(topic, events, {p: next_offsets[p] for p in touched}, dead), now)
    return len(records)
