"""The hand-over of fetched records to the agents (services/worker/delivery.py): direct
while the flow runs, Faust's own wait while it is suspended and for every other caller."""

from __future__ import annotations

import asyncio

import pytest
from faust.transport.consumer import Consumer
from mode import Service

from services.worker import delivery

pytestmark = pytest.mark.unit


class Drain(Service):
    """What the drain loop needs of Faust's consumer: its flow event, and its wait_first."""

    wait_first = delivery._deliver_first

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()


async def test_a_record_is_handed_over_in_the_same_turn_of_the_loop() -> None:
    drain, turned, delivered = Drain(), [], []
    asyncio.get_running_loop().call_soon(turned.append, True)

    async def callback() -> str:
        delivered.append(True)
        return "put"

    tasks = len(asyncio.all_tasks())
    result = await drain.wait_first(callback(), drain.suspend_flow.wait())
    # No task was made and no other callback of the loop ran in between.
    assert (delivered, turned, len(asyncio.all_tasks())) == ([True], [], tasks)
    assert (result.results, result.stopped) == (["put"], False)


async def test_a_full_buffer_is_waited_for_then_the_record_goes_in() -> None:
    drain, room = Drain(), asyncio.Event()

    async def callback() -> str:
        await room.wait()  # a stream's buffer is full until its agent takes an event
        return "put"

    handing = asyncio.ensure_future(drain.wait_first(callback(), drain.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert not handing.done()
    room.set()
    assert (await handing).results == ["put"]


async def test_while_the_flow_is_suspended_faust_s_own_wait_decides() -> None:
    drain, room = Drain(), asyncio.Event()
    drain.suspend_flow.set()  # a rebalance began

    async def callback() -> str:
        await room.wait()
        return "put"

    # Faust's wait returns as soon as the flow's event is set, leaving the hand-over.
    result = await asyncio.wait_for(drain.wait_first(callback(), drain.suspend_flow.wait()), 1)
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


def test_the_worker_installs_it_on_faust_s_consumer() -> None:
    import services.worker.faust_app  # noqa: F401  (installs it)

    assert Consumer.wait_first is delivery._deliver_first
