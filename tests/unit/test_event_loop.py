"""The worker's event loop: the setting picks the policy every later loop comes from, so
Faust's main loop and its consumer thread's (mode's ServiceThread calls new_event_loop) are
the same kind. That a real worker runs on uvloop by default: tests/integration/test_metrics.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import uvloop

from services.worker import event_loop


@pytest.fixture(autouse=True)
def policy_restored() -> Iterator[None]:
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


@pytest.mark.parametrize(("on", "kind"), [(True, "uvloop"), (False, "asyncio")])
def test_every_later_loop_is_of_the_chosen_kind(on: bool, kind: str) -> None:
    event_loop.use(on)
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop) is on
        assert loop.run_until_complete(_running()) == kind
    finally:
        loop.close()


async def _running() -> str:
    return event_loop.running()
