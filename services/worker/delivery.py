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
suspended, for the records of the runners' input topics. The callback puts the record into
each subscribed stream's buffer. It returns without waiting unless a buffer is full
(``stream_buffer_maxsize``), and then it waits for that stream to take an event, which its
agent does in a rebalance too (Faust waits for the streams to be empty before it lets
partitions go).

A hand-over awaited directly is not given up when a rebalance suspends the flow: it ends
when the buffer has room again, which may be after the next assignment has sought the
partition, and Faust's loop then raises the partition's read offset to the record's. For an
input topic that is harmless: Faust's read offsets are not read there and the runners skip
a record they have already seen (``faust_seam.deliver_every_input_record``). A changelog
record is different: Faust's recovery drops the records its seek fetches again below that
read offset, and applies the stale record itself after its queue was cleared, skipping
everything below it (RELIABILITY.md, defect 14: a store missed the changelog records
between). So changelog records, and every other use of ``wait_first``, keep Faust's own
wait, which gives the hand-over up as soon as the flow is suspended.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from services.worker.faust_seam import (
    FAUST_WAIT_FIRST,
    DrainResults,
    handed_message,
    is_drain_flow_wait,
    reads_every_record,
    replace_consumer_wait_first,
)


async def _deliver_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
    """``Consumer.wait_first``: the drain loop's hand-over of an input record awaited
    directly, the rest as Faust."""
    if (
        len(coros) == 2
        and timeout is None
        and is_drain_flow_wait(self, coros[1])
        and not self.suspend_flow.is_set()
        and isinstance(coros[0], Coroutine)
        and _of_an_input_topic(self, handed_message(coros[0]))
    ):
        coros[1].close()  # never started: nothing to cancel
        result = await coros[0]
        return DrainResults([coros[0]], [result], False)
    return await FAUST_WAIT_FIRST(self, *coros, timeout=timeout)


def _of_an_input_topic(consumer: Any, message: Any) -> bool:
    return message is not None and reads_every_record(consumer, message.topic)


def install() -> None:
    """Patch Faust's consumer class (idempotent; every Faust app of the process)."""
    replace_consumer_wait_first(_deliver_first)
