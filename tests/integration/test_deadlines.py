"""Durable deadlines on a real broker: step timeouts and reservation expiry, across restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.integration.harness import Stack, Worker, free_port, isolated_settings, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def short_steps(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """A participant gets 3 s to answer; reservations would outlive that by far."""
    tmp = tmp_path_factory.mktemp("timeouts")
    settings = isolated_settings(tmp, step_timeout_s=3.0, reservation_ttl_s=300.0)
    async with running_stack(settings, tmp) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def short_holds(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """Reservations live 2 s; a saga step may wait 60 s."""
    tmp = tmp_path_factory.mktemp("expiry")
    settings = isolated_settings(tmp, step_timeout_s=60.0, reservation_ttl_s=2.0)
    async with running_stack(settings, tmp) as s:
        yield s


async def test_participant_that_never_answers_times_out_and_compensates(short_steps: Stack) -> None:
    await short_steps.set_stock("mango", 4)
    order = await short_steps.place([("mango", 3)], method="hang")
    await short_steps.wait_stock("mango", lambda f: f["reserved"] == 3)
    outcome = (await short_steps.tail.wait_for([order], 20))[order]
    assert (outcome.status, outcome.reason) == ("CANCELLED", "timeout")
    mango = await short_steps.wait_stock("mango", lambda f: f["reserved"] == 0)
    assert mango["on_hand"] == 4


async def test_step_timeout_fires_after_the_worker_was_killed(short_steps: Stack) -> None:
    """The deadline lives in the table, not in the process that set it."""
    await short_steps.set_stock("papaya", 2)
    order = await short_steps.place([("papaya", 1)], method="hang")
    await short_steps.wait_stock("papaya", lambda f: f["reserved"] == 1)
    await asyncio.to_thread(short_steps.worker.kill)
    await asyncio.sleep(4)  # the deadline passes while no worker runs
    assert order not in short_steps.tail.outcomes
    await asyncio.to_thread(short_steps.worker.start)
    outcome = (await short_steps.tail.wait_for([order], 30))[order]
    assert (outcome.status, outcome.reason) == ("CANCELLED", "timeout")
    papaya = await short_steps.wait_stock("papaya", lambda f: f["reserved"] == 0)
    assert papaya["on_hand"] == 2


async def test_unconfirmed_reservation_expires_frees_stock_and_cancels(short_holds: Stack) -> None:
    await short_holds.set_stock("guava", 1)
    order = await short_holds.place([("guava", 1)], method="hang")
    outcome = (await short_holds.tail.wait_for([order], 20))[order]
    assert (outcome.status, outcome.reason) == ("CANCELLED", "reservation for guava expired")
    guava = await short_holds.wait_stock("guava", lambda f: f["reserved"] == 0)
    assert guava["on_hand"] == 1
    released = [
        e for e in short_holds.tail.events_of("product:guava") if e.type == "ledger.Released"
    ]
    assert [(e.payload["reason"], e.saga_id) for e in released] == [("expired", order)]
    # The unit is free again: the next order gets it.
    again = await short_holds.place([("guava", 1)])
    assert (await short_holds.tail.wait_for([again], 20))[again].status == "CONFIRMED"


async def test_deadlines_fire_on_the_worker_that_inherits_a_dead_workers_partitions(
    short_steps: Stack, tmp_path: Path
) -> None:
    second = Worker(
        short_steps.settings.model_copy(
            update={"worker_web_port": free_port(), "data_dir": tmp_path / "second-worker"}
        ),
        tmp_path,
    )
    await asyncio.to_thread(second.start)
    try:
        await asyncio.sleep(3)  # the group rebalances: each worker now owns some partitions
        await short_steps.set_stock("lychee", 20)
        orders = [
            await short_steps.place([("lychee", 1)], method="hang", customer=f"l{i}")
            for i in range(12)  # spread over every partition of the saga topic
        ]
        await short_steps.wait_stock("lychee", lambda f: f["reserved"] == 12)
        await asyncio.to_thread(short_steps.worker.kill)  # its partitions move to `second`
        outcomes = await short_steps.tail.wait_for(orders, 40)
        assert {(o.status, o.reason) for o in outcomes.values()} == {("CANCELLED", "timeout")}
        assert len(outcomes) == 12
        lychee = await short_steps.wait_stock("lychee", lambda f: f["reserved"] == 0)
        assert lychee["on_hand"] == 20
    finally:
        await asyncio.to_thread(second.stop)
        await asyncio.to_thread(short_steps.worker.start)  # leave the module's stack whole
