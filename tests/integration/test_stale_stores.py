"""A worker's local stores, judged by their last applied changelog record on the real
broker: kept when it is recent, discarded when older than the tombstone retention allows,
and the worker then recovers the partition from its changelog."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.worker.stale_stores import MAX_AGE, discard_stale_stores, local_stores
from tests.integration.harness import isolated_settings, running_stack

pytestmark = [pytest.mark.integration]


async def test_a_recent_store_is_kept_an_old_one_discarded_and_recovered(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    async with running_stack(settings, tmp_path) as stack:
        await stack.set_stock("fig", 5)
        first = await stack.place([("fig", 1)])
        assert (await stack.tail.wait_for([first], 30))[first].status == "CONFIRMED"
        await asyncio.to_thread(stack.worker.stop)
        [tables] = settings.data_dir.glob("v*/tables")
        stores = local_stores(tables, settings.app_id)
        assert stores  # the partitions it wrote hold a persisted offset
        now = datetime.now(UTC)
        assert await discard_stale_stores(settings, MAX_AGE, now) == []
        assert all(s.path.exists() for s in stores)
        # as if the worker had been down for a day and more
        lines = await discard_stale_stores(settings, MAX_AGE, now + timedelta(days=2))
        assert len(lines) == len(stores)
        assert all("ago; Faust recovers it from its changelog" in line for line in lines)
        assert not any(s.path.exists() for s in stores)
        await asyncio.to_thread(stack.worker.start)
        # recovered from the changelogs: the stock remembers the first sale
        second = await stack.place([("fig", 1)])
        assert (await stack.tail.wait_for([second], 30))[second].status == "CONFIRMED"
        fig = await stack.wait_stock("fig", lambda f: f["on_hand"] == 3)
        assert fig["reserved"] == 0
