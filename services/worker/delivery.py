"""Faust's hand-over of fetched records to the agents, without four tasks per record.

Faust's consumer (faust-streaming 0.15, ``Consumer._drain_messages``) gives each fetched
record to the agents' streams with ``await self.wait_first(callback(message),
self.suspend_flow.wait())``. Per record that creates four tasks (the callback, the flow's
wait, the consumer's stop and crash waits), waits for the first and cancels the other
three: two to three turns of the event loop per record. The worker's agents share that
loop, so under load each record waited for its turn behind their batches. At full load
records spent 1.2-1.7 s per hop between their producer and the next agent's batch, while
the agents worked a third of the time and the loop idled (BENCHMARKS.md, "Issue 11,
fourth step").

:func:`install` makes that one call await the callback directly while the flow is not
suspended, on the worker's consumer (whose read offsets are
``faust_seam.InputReadOffsets``). The callback puts the record into each subscribed
stream's buffer, or a changelog record into the recovery's queue. It returns without
waiting unless a buffer is full (``stream_buffer_maxsize``), and then it waits for that
stream to take an event, which its agent does in a rebalance too (Faust waits for the
streams to be empty before it lets partitions go).

A hand-over awaited directly is not given up when a rebalance suspends the flow, as
Faust's race gives it up: it ends when there is room again, which may be after the next
assignment has sought the partition; Faust's loop then raises the partition's read offset
to the record's. For an input record that is harmless: Faust's read offsets are not read
for input topics and the runners skip a record they have already seen
(``faust_seam.deliver_every_input_record``). For a changelog record whose partition's read
ended meanwhile (services/worker/changelog_reads.py) the raised read offset would make the
loop drop the records the new read fetches again (RELIABILITY.md, defect 14), so that write
is not kept (``faust_seam.disown_stale_hand_over``), on either path; the recovery refuses
the record itself. While the flow is suspended, on any other consumer, and for every other
use of ``wait_first``, Faust's own wait runs unchanged.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from services.worker.faust_seam import (
    FAUST_WAIT_FIRST,
    DrainResults,
    InputReadOffsets,
    changelog_reads,
    disown_stale_hand_over,
    handed_message,
    is_drain_flow_wait,
    replace_consumer_wait_first,
)


async def _deliver_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
    """``Consumer.wait_first``: the drain loop's hand-over awaited directly, the rest as Faust."""
    offsets = getattr(self, "_read_offset", None)
    message = handed_message(coros[0]) if len(coros) == 2 else None
    if message is None or not isinstance(offsets, InputReadOffsets):
        return await FAUST_WAIT_FIRST(self, *coros, timeout=timeout)
    if (
        timeout is None
        and is_drain_flow_wait(self, coros[1])
        and not self.suspend_flow.is_set()
        and isinstance(coros[0], Coroutine)
    ):
        coros[1].close()  # never started: nothing to cancel
        results = DrainResults([coros[0]], [await coros[0]], False)
    else:
        results = await FAUST_WAIT_FIRST(self, *coros, timeout=timeout)
    if message.topic not in offsets.input_topics and changelog_reads(self).is_stale(message):
        disown_stale_hand_over(self, message)
    return results


def install() -> None:
    """Patch Faust's consumer class (idempotent; every Faust app of the process)."""
    replace_consumer_wait_first(_deliver_first)
