"""Agent batches that start with their first event (services/worker/batching.py), on a real
Faust stream fed through the agent's test channel (no broker: nothing here is about Kafka)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import faust
import pytest

from services.worker.batching import take_queued

pytestmark = pytest.mark.unit

Handler = Callable[[list[Any]], Awaitable[None]]


@asynccontextmanager
async def batched_agent(
    max_: int, linger: float = 0.0, handle: Handler | None = None
) -> AsyncIterator[tuple[Any, list[list[Any]]]]:
    """An agent consuming ``take_queued`` batches; yields its test wrapper and the batches'
    values as each batch was when it was yielded."""
    app = faust.App("batching-test", broker="kafka://127.0.0.1:1", store="memory://")
    seen: list[list[Any]] = []

    async def consume(stream: Any) -> None:
        async for events in take_queued(stream, max_, linger):
            seen.append([event.value for event in events])
            if handle is not None:
                await handle(events)

    agent = app.agent(name="batched")(consume)
    async with agent.test_context() as wrapper:
        yield wrapper, seen


async def until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_what_is_queued_goes_in_one_batch_and_no_batch_exceeds_its_maximum() -> None:
    async with batched_agent(max_=3) as (agent, seen):
        for value in range(7):
            await agent.put(value, wait=False)
        await until(lambda: sum(map(len, seen)) == 7)
    assert seen == [[0, 1, 2], [3, 4, 5], [6]]


async def test_a_lone_event_is_handled_at_once_not_when_a_clock_ticks() -> None:
    async with batched_agent(max_=200) as (agent, seen):
        await asyncio.sleep(0.2)  # idle first: a clock-driven batch would be mid-period
        started = time.monotonic()
        await agent.put("alone", wait=False)
        await until(lambda: bool(seen))
        waited = time.monotonic() - started
    assert seen == [["alone"]]
    assert waited < 0.05


async def test_a_linger_keeps_a_batch_open_for_events_that_come_soon_after_its_first() -> None:
    async with batched_agent(max_=200, linger=0.3) as (agent, seen):
        await agent.put("first", wait=False)
        await asyncio.sleep(0.1)
        await agent.put("second", wait=False)
        await until(lambda: bool(seen))
        await asyncio.sleep(0.4)
    assert seen == [["first", "second"]]


async def test_events_that_come_while_a_batch_is_handled_wait_for_the_next_batch() -> None:
    release = asyncio.Event()
    handled: list[list[Any]] = []

    async def slow(events: list[Any]) -> None:
        if not handled:
            await release.wait()
        handled.append([event.value for event in events])

    async with batched_agent(max_=200, handle=slow) as (agent, seen):
        await agent.put(1, wait=False)
        await until(lambda: bool(seen))
        for value in (2, 3, 4):
            await agent.put(value, wait=False)
        await asyncio.sleep(0.05)
        release.set()
        await until(lambda: len(handled) == 2)
    # The first batch did not change under its consumer; the later events came together.
    assert handled == [[1], [2, 3, 4]]


async def test_events_are_acked_only_after_their_batch_is_handled() -> None:
    acked_while_handled: list[bool] = []
    events_of_first: list[Any] = []

    async def remember(events: list[Any]) -> None:
        acked_while_handled.extend(event.message.acked for event in events)
        events_of_first.extend(events)

    async with batched_agent(max_=200, handle=remember) as (agent, _):
        await agent.put("a", wait=False)
        await agent.put("b", wait=False)
        await until(lambda: len(events_of_first) == 2)
        await until(lambda: all(event.message.acked for event in events_of_first))
    assert acked_while_handled == [False, False]
