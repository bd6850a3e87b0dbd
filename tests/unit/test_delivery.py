"""The hand-over of fetched records to the agents (services/worker/delivery.py): direct
while the flow runs, the read offset of a changelog record whose partition's read ended
meanwhile not kept; Faust's own wait while the flow is suspended and for every other caller."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace

import faust
import pytest
from faust.transport.consumer import Consumer
from faust.types import TP
from mode import Service

from services.worker import delivery, faust_seam
from tests.unit.test_changelog_reads import Partitions, State

pytestmark = pytest.mark.unit


class Drain(Service):
    """What the drain loop needs of Faust's consumer: its flow event, its wait_first, and
    its read offsets, off for the input topic ``in`` as the worker sets them."""

    wait_first = delivery._deliver_first

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()
        self._read_offset = faust_seam.InputReadOffsets(frozenset({"in"}), {})
        self.partitions = Partitions()
        self.partitions.now.update({CHANGELOG_TP: State(), INPUT.tp: State()})
        self._sagaline_changelog_reads = self.partitions.reads()

    def drain(self, message: Msg) -> None:
        """aiokafka hands the record over and the consumer hands it on (stamped)."""
        reads = faust_seam.changelog_reads(self)
        reads.drained({message.tp: [message]}, lambda tp: tp.topic != "in")
        assert reads.hand_on(message.tp, message)

    def seek(self, tp: TP, offset: int) -> None:
        """A seek of ``tp``: a new read, and Faust's read offset set to where it begins."""
        self.partitions.seek(tp)
        self._read_offset[tp] = offset


@dataclass(eq=False)
class Msg:
    topic: str
    tp: TP
    offset: int


INPUT = Msg(topic="in", tp=TP("in", 0), offset=5)
CHANGELOG_TP = TP("app-order-saga-state-changelog", 2)


async def test_a_record_is_handed_over_in_the_same_turn_of_the_loop() -> None:
    drain, turned, delivered = Drain(), [], []
    asyncio.get_running_loop().call_soon(turned.append, True)

    async def callback(message: object) -> str:
        delivered.append(True)
        return "put"

    tasks = len(asyncio.all_tasks())
    result = await drain.wait_first(callback(INPUT), drain.suspend_flow.wait())
    # No task was made and no other callback of the loop ran in between.
    assert (delivered, turned, len(asyncio.all_tasks())) == ([True], [], tasks)
    assert (result.results, result.stopped) == (["put"], False)


async def test_a_full_buffer_is_waited_for_then_the_record_goes_in() -> None:
    drain, room = Drain(), asyncio.Event()

    async def callback(message: object) -> str:
        await room.wait()  # a stream's buffer is full until its agent takes an event
        return "put"

    handing = asyncio.ensure_future(drain.wait_first(callback(INPUT), drain.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert not handing.done()
    room.set()
    assert (await handing).results == ["put"]


async def test_while_the_flow_is_suspended_faust_s_own_wait_decides() -> None:
    drain, room = Drain(), asyncio.Event()
    drain.suspend_flow.set()  # a rebalance began

    async def callback(message: object) -> str:
        await room.wait()
        return "put"

    # Faust's wait returns as soon as the flow's event is set, leaving the hand-over.
    wait = drain.wait_first(callback(INPUT), drain.suspend_flow.wait())
    result = await asyncio.wait_for(wait, 1)
    assert (result.results, result.stopped) == ([True], False)


async def test_other_waits_are_faust_s() -> None:
    drain, other, never = Drain(), asyncio.Event(), asyncio.Event()
    other.set()

    async def blocked() -> str:
        await never.wait()
        return "never"

    # Not the flow's wait: Faust's wait_first races both (a direct await would hang).
    result = await asyncio.wait_for(drain.wait_first(blocked(), other.wait()), 1)
    assert result.results == [True]


async def hand_over_waiting_for_room(drain: Drain, message: Msg, seek: bool) -> None:
    """What Faust's drain loop does with one record: the hand-over (waiting for room in a
    full queue, a seek of its partition meanwhile or not), then the partition's read offset."""
    room = asyncio.Event()
    drain.drain(message)

    async def callback(message: object) -> str:
        await room.wait()  # the recovery's changelog queue is full
        return "put"

    handing = asyncio.ensure_future(drain.wait_first(callback(message), drain.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    if seek:  # the next assignment's recovery seeks the partition to 852
        drain.seek(message.tp, 852)
    room.set()  # the queue has room again (cleared on resume)
    assert (await asyncio.wait_for(handing, 1)).results == ["put"]
    drain._read_offset[message.tp] = message.offset


async def test_a_changelog_record_handed_over_across_a_seek_leaves_the_read_offset() -> None:
    # Defect 14: kept, the stale record raised the read offset over the records the seek
    # fetched again, and Faust's delivery loop dropped them as read.
    drain = Drain()
    stale = Msg(topic=CHANGELOG_TP.topic, tp=CHANGELOG_TP, offset=1581)
    await hand_over_waiting_for_room(drain, stale, seek=True)
    assert drain._read_offset[CHANGELOG_TP] == 852
    # The record the seek fetches again (same partition and offset, another object) counts.
    again = Msg(topic=CHANGELOG_TP.topic, tp=CHANGELOG_TP, offset=1581)
    await hand_over_waiting_for_room(drain, again, seek=False)
    assert drain._read_offset[CHANGELOG_TP] == 1581


async def test_while_the_flow_is_suspended_a_stale_hand_over_does_not_raise_it_either() -> None:
    drain = Drain()
    stale = Msg(topic=CHANGELOG_TP.topic, tp=CHANGELOG_TP, offset=1581)
    drain.drain(stale)
    drain.suspend_flow.set()  # a rebalance began: Faust's own wait gives the hand-over up
    drain.seek(CHANGELOG_TP, 852)

    async def callback(message: object) -> str:
        await asyncio.Event().wait()
        return "put"

    await asyncio.wait_for(drain.wait_first(callback(stale), drain.suspend_flow.wait()), 1)
    drain._read_offset[CHANGELOG_TP] = stale.offset  # the loop's write after the wait
    assert drain._read_offset[CHANGELOG_TP] == 852


async def test_an_input_record_handed_over_across_a_seek_is_the_runners_to_judge() -> None:
    drain = Drain()
    await hand_over_waiting_for_room(drain, INPUT, seek=True)
    assert drain._read_offset[INPUT.tp] is None  # Faust's filter off for inputs


async def test_the_recovery_never_gets_a_record_of_an_ended_read() -> None:
    app = faust.App("t-stale", broker="kafka://127.0.0.1:1")
    faust_seam.deliver_every_input_record(app, [])  # the worker's consumer
    partitions = Partitions()
    partitions.now[CHANGELOG_TP] = State()
    reads = partitions.reads()
    app.consumer._sagaline_changelog_reads = reads  # type: ignore[attr-defined]
    faust_seam.skip_untracked_changelog_records(app)
    queue = app.tables.changelog_queue
    stale = SimpleNamespace(message=Msg(topic=CHANGELOG_TP.topic, tp=CHANGELOG_TP, offset=1581))
    reads.drained({CHANGELOG_TP: [stale.message]}, lambda tp: True)
    assert reads.hand_on(CHANGELOG_TP, stale.message)
    queue.put_nowait(stale)
    partitions.seek(CHANGELOG_TP)
    fresh = SimpleNamespace(message=Msg(topic=CHANGELOG_TP.topic, tp=CHANGELOG_TP, offset=852))
    reads.drained({CHANGELOG_TP: [fresh.message]}, lambda tp: True)
    assert reads.hand_on(CHANGELOG_TP, fresh.message)
    queue.put_nowait(fresh)
    assert await asyncio.wait_for(queue.get(), 1) is fresh


async def test_the_message_a_hand_over_delivers_is_faust_s_conductor_callback_argument() -> None:
    app = faust.App("t-delivery", broker="kafka://127.0.0.1:1")
    message = SimpleNamespace(topic="in", tp=("in", 0))
    handing = app.topics.on_message(message)  # what Faust's drain loop hands to wait_first
    try:
        assert faust_seam.handed_message(handing) is message
    finally:
        handing.close()
    other = asyncio.sleep(0)
    assert faust_seam.handed_message(other) is None
    other.close()


def test_the_worker_installs_it_on_faust_s_consumer() -> None:
    import services.worker.faust_app  # noqa: F401  (installs it)

    assert Consumer.wait_first is delivery._deliver_first
