"""Batches of a Faust stream's events that start when the first event comes, not on a clock.

Faust's ``Stream.take_events(max_, within)`` wakes every ``within`` seconds whether or not
anything came, and holds a batch until that clock ticks even when nothing more is queued.
With a dozen agents and a 5 ms ``within`` that is ~2,400 wake-ups a second of an idle worker
(16% of a core measured, BENCHMARKS.md), and up to 5 ms added to every hop of a saga.

:func:`take_queued` waits without a timer for the first event, then takes every event already
queued for the stream (up to ``max_``) and yields them. Under load the batches grow by
themselves: events queue while the previous batch is handled, and the next batch takes them
all. ``linger`` (seconds, 0 by default) optionally waits that much longer for a batch to fill
after its first event, which trades latency for bigger batches.

What it keeps from Faust's ``take_events`` (whose body it follows, Faust 0.15.3): the stream's
own acks are off while it runs, and each event is acked after its batch is handled, so an
offset is committed only once its batch is done; the stream does not add to a batch while it
is being handled (``consuming``), so a batch never changes under its consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from services.worker.faust_seam import close_with_stream, enable_passive, remove_processor

# Loop turns to wait for an event that left the stream's queue but has not reached the
# buffer yet (Faust's stream sleeps once per event before its processors run).
_IN_FLIGHT_TURNS = 2


def take_queued(stream: Any, max_: int, linger: float = 0.0) -> AsyncIterator[list[Any]]:
    """Yield lists of up to ``max_`` events of ``stream``: every event queued when the first
    arrives, or that arrives within ``linger`` seconds of it."""
    generator = _take_queued(stream, max_, linger)
    # The stream closes a generator left behind when it stops, so the finally below (acks
    # back on) runs deterministically.
    close_with_stream(stream, generator)
    return generator


async def _take_queued(self: Any, max_: int, linger: float) -> AsyncGenerator[list[Any], None]:
    events: list[Any] = []
    has_events = asyncio.Event()
    full = asyncio.Event()
    drained = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    queue = getattr(self.channel, "queue", None)
    restore_acks: bool = self.enable_acks

    async def add_to_batch(value: Any) -> Any:
        nonlocal consuming
        try:
            if consuming is not None:
                try:
                    await consuming
                finally:
                    consuming = None
            event = self.current_event
            if event is None:
                raise RuntimeError("a batched stream found no current event")
            events.append(event)
            has_events.set()
            if len(events) >= max_:
                full.set()
                # A batch holds at most max_ events: wait until this one is handled.
                drained.clear()
                await self.wait(drained)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.log.exception("Error adding to a batch: %r", exc)
            await self.crash(exc)
        return value

    def queued() -> bool:
        return queue is not None and not queue.empty()

    self.enable_acks = False
    self.add_processor(add_to_batch)
    enable_passive(self)
    try:
        while not self.should_stop:
            if (await self.wait_for_stopped(has_events)) or not events:
                continue
            if linger > 0 and not full.is_set():
                await self.wait_for_stopped(full, timeout=linger)
            turns = 0
            while not full.is_set() and (queued() or turns < _IN_FLIGHT_TURNS):
                # Let the stream move what is already queued into this batch.
                turns = 0 if queued() else turns + 1
                await asyncio.sleep(0)
            consuming = asyncio.get_running_loop().create_future()
            try:
                yield list(events)
            finally:
                handled = list(events)
                events.clear()
                has_events.clear()
                for event in handled:
                    await self.ack(event)
                if not consuming.done():
                    consuming.set_result(None)
                full.clear()
                drained.set()
    finally:
        self.enable_acks = restore_acks
        remove_processor(self, add_to_batch)
