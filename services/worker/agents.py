"""The agents feeding batch consumers (process runners, the ingest edge), and how a failed
batch is retried until it is done."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import faust
from faust.types import TP

from runtime.settings import Settings
from services.worker.batching import take_queued
from services.worker.faust_seam import changing_hands
from services.worker.metrics import Metrics
from services.worker.positions import InputPositions
from services.worker.runner import FirstOffset, Incoming, Table

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0


class Batched(Protocol):
    """What consumes positioned input in batches: a process runner or an ingest edge."""

    metrics: Metrics
    table: Table
    positions: InputPositions

    @property
    def first_offset(self) -> FirstOffset: ...

    @property
    def name(self) -> str: ...

    @property
    def input_topics(self) -> tuple[str, ...]: ...

    async def handle_batch(self, batch: Sequence[Incoming]) -> None: ...

    async def reseek_overdue(self) -> None: ...


def register_agent(
    app: faust.App, settings: Settings, topic: Any, name: str, consumer: Batched
) -> None:
    """One agent feeding ``consumer`` batches of ``topic``'s records until each is done."""
    linger = settings.batch_within_ms / 1000

    async def agent(stream: Any) -> None:
        async for events in take_queued(stream, settings.batch_size, linger):
            batch = [
                Incoming(
                    topic=e.message.topic,
                    partition=e.message.partition,
                    offset=e.message.offset,
                    key=e.key,
                    value=e.value,
                    timestamp=e.message.timestamp,
                    headers=e.message.headers,
                )
                for e in events
            ]
            await handle_until_done(app, consumer, batch)

    app.agent(topic, name=name)(agent)


async def handle_until_done(app: faust.App, runner: Batched, batch: list[Incoming]) -> None:
    """Retry a failed batch (broker down, send timed out) with capped backoff until it is
    done: Faust acks a batch's events whatever happens, so giving up here would skip them.
    Records of partitions this worker no longer owns are left to their new owner, which
    resumes from the position stored in the table.

    A batch that fails while partitions change hands is left at once, to the assignment
    that ends the rebalance: it seeks every partition it gives this worker to its stored
    position (services/worker/resume.py), so the records are read again by whoever holds
    them then. Retrying would hold the rebalance itself: Faust's revocation waits for this
    batch's events, and a batch refused because the worker is in doubt is refused until an
    assignment completes (services/worker/membership.py). A thawed worker stayed out of
    its group that way until it was stopped (RELIABILITY.md, defect 6)."""
    backoff = RETRY_FIRST_S
    while batch:
        try:
            await runner.handle_batch(batch)
            return
        except Exception as exc:
            runner.metrics.inc(runner.name, "batch_retries")
            moving = changing_hands(app)
            log.warning(
                "%s: a batch of %d record(s) failed (%s: %s); %s",
                runner.name,
                len(batch),
                type(exc).__name__,
                exc,
                "partitions are changing hands: left to the assignment that follows"
                if moving
                else f"retrying in {backoff:.1f} s",
            )
            if moving:
                return
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, RETRY_MAX_S)
        owned = app.consumer.assignment()
        batch = [r for r in batch if TP(r.topic, r.partition) in owned]
