"""The hand-over of fetched records to the agents (services/worker/delivery.py): direct
for the runners' input records while the flow runs; Faust's own wait while it is suspended,
for changelog records and for every other caller."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import faust
import pytest
from faust.transport.consumer import Consumer
from mode import Service

from services.worker import delivery, faust_seam

pytestmark = pytest.mark.unit


class Drain(Service):
    """What the drain loop needs of Faust's consumer: its flow event, its wait_first, and
    its read offsets, off for the input topic ``in`` as the worker sets them."""

    wait_first = delivery._deliver_first

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()
        self._read_offset = faust_seam._InputReadOffsets(frozenset({"in"}), {})


INPUT = SimpleNamespace(topic="in")
CHANGELOG = SimpleNamespace(topic="app-order-saga-state-changelog")


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


async def test_a_changelog_record_waiting_for_room_is_given_up_when_a_rebalance_begins() -> None:
    # Defect 14: awaited directly, this hand-over would end after the next assignment's
    # seek, put a stale record into the recovery's cleared queue and raise the partition's
    # read offset over the records the seek fetches again.
    drain, room, delivered = Drain(), asyncio.Event(), []

    async def callback(message: object) -> str:
        await room.wait()  # the recovery's changelog queue is full
        delivered.append(message)
        return "put"

    handing = asyncio.ensure_future(
        drain.wait_first(callback(CHANGELOG), drain.suspend_flow.wait())
    )
    await asyncio.sleep(0.01)
    assert not handing.done()
    drain.suspend_flow.set()  # a rebalance began
    result = await asyncio.wait_for(handing, 1)
    room.set()  # the queue has room again (cleared on resume)
    await asyncio.sleep(0.01)
    assert (result.results, delivered) == ([True], [])


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
