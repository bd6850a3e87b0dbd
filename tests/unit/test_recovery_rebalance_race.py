"""A recovery step that ends as a rebalance lands (RELIABILITY.md, defect 16): Faust's
``Recovery._wait`` misses the rebalance when the step's waiter finished one turn of the
loop before ``on_rebalance`` set the signal; the seam's patch reads the signal itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import mode
import pytest
from faust.tables.recovery import RebalanceAgain, Recovery

from services.worker import faust_seam

FAUST_WAIT = getattr(Recovery, "_sagaline_faust_wait", Recovery._wait)
"""Faust's own, whether or not an app built earlier in this process patched it."""


class Steps(mode.Service):
    """What ``Recovery._wait`` reads of a recovery: mode's ``wait_first`` and the signal."""

    def __init__(self, wait: Callable[..., Awaitable[None]]) -> None:
        super().__init__()
        self.signal_recovery_start = asyncio.Event()
        self.wait = wait


async def step_then_rebalance(wait: Callable[..., Awaitable[None]], turns: int) -> bool:
    """Whether the step's ``_wait`` gave up for the rebalance: the step ends (the slurp
    loop finds nothing left to read), and ``turns`` turns of the loop later a rebalance
    sets the signal, before the recovery's task runs again."""
    steps = Steps(wait)
    step_done = asyncio.Event()

    async def slurp_then_rebalance() -> None:
        step_done.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        steps.signal_recovery_start.set()

    rebalance = asyncio.ensure_future(slurp_then_rebalance())
    try:
        await steps.wait(steps, step_done.wait())
    except RebalanceAgain:
        return True
    finally:
        await rebalance
    return False


async def test_faust_alone_misses_a_rebalance_that_lands_as_a_step_ends() -> None:
    assert await step_then_rebalance(FAUST_WAIT, turns=1)  # same turn: seen
    assert not await step_then_rebalance(FAUST_WAIT, turns=2)  # the miss defect 16 rode


async def test_with_the_seam_the_step_gives_up_for_the_rebalance() -> None:
    faust_seam.no_recovery_step_past_a_rebalance()
    faust_seam.no_recovery_step_past_a_rebalance()  # once, however often asked
    patched: Any = Recovery._wait
    assert patched is not FAUST_WAIT
    assert await step_then_rebalance(patched, turns=1)
    assert await step_then_rebalance(patched, turns=2)


async def test_a_step_that_ended_before_the_rebalance_is_kept() -> None:
    faust_seam.no_recovery_step_past_a_rebalance()
    # The recovery ran on before the signal was set: that step stands (the next one
    # gives up when it meets the signal).
    assert not await step_then_rebalance(Recovery._wait, turns=3)


@pytest.fixture(autouse=True)
def faust_wait_restored() -> Any:
    patched = getattr(Recovery, "_sagaline_rechecks_rebalance", False)
    before = Recovery._wait
    yield
    Recovery._wait = before  # type: ignore[method-assign]
    Recovery._sagaline_rechecks_rebalance = patched  # type: ignore[attr-defined]


async def test_no_step_starts_once_a_rebalance_is_signalled() -> None:
    # Faust swallows the RebalanceAgain of its wait for the active changelogs (an
    # ``except Exception`` that finishes a span) and goes on to its next steps: the standby
    # seeks or the completion callbacks. None of them may run.
    faust_seam.no_recovery_step_past_a_rebalance()
    steps = Steps(Recovery._wait)
    steps.signal_recovery_start.set()
    ran: list[str] = []

    async def seek_standbys() -> None:
        ran.append("seek")

    step = seek_standbys()
    with pytest.raises(RebalanceAgain):
        await steps.wait(steps, step)
    assert ran == []
    assert step.cr_frame is None  # closed, not left to warn that it was never awaited
