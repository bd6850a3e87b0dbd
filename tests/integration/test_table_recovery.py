"""A worker SIGKILLed under load leaves table stores that Faust recovers to their changelog.

Faust recovers a table partition from the local RocksDB plus the changelog records after the
offset that RocksDB says it holds. If the local store is ever ahead of the changelog, the
recovery mixes old and new values (a saga back at an older state while its partition's
stored position is past the replies that moved it on). Each kill here is checked by doing
Faust's recovery on the files the dead worker left (``faults/stores.py``).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from faults.stores import recovery_mismatches
from runtime.topics import table_name
from sagas.catalog import running_channels
from tests.integration.harness import Stack, isolated_settings, running_stack

pytestmark = [pytest.mark.integration]

PRODUCTS = [f"rec-{i}" for i in range(5)]
STOCK = 400
KILLS = 4


async def test_every_kill_leaves_stores_that_recover_to_their_changelog(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    async with running_stack(settings, tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        lines: dict[str, list[str]] = {}
        load = asyncio.create_task(
            stack.place_steadily(PRODUCTS, 600, lines, seed=7, pause_s=0.005)
        )
        try:
            await _kill_and_check(stack, load)
        except BaseException:
            load.cancel()  # stop placing orders into a stack that is being torn down
            raise
        orders = await load

        outcomes = await stack.tail.wait_for(orders, 180)
        assert len(outcomes) == len(orders), f"{len(orders) - len(outcomes)} orders never ended"
        await stack.assert_settled(outcomes, lines, dict.fromkeys(PRODUCTS, STOCK))


async def _kill_and_check(stack: Stack, load: asyncio.Task[list[str]]) -> None:
    settings = stack.settings
    rnd = random.Random(3)
    for kill in range(KILLS):
        done_before = len(stack.tail.outcomes)
        while len(stack.tail.outcomes) < done_before + 20 and not load.done():
            await asyncio.sleep(0.05)
        await asyncio.sleep(rnd.uniform(0.0, 0.5))  # mid-batch, somewhere
        await asyncio.to_thread(stack.worker.kill)
        [tables_dir] = settings.data_dir.glob("v*/tables")
        for channel in running_channels(settings.cdc_enabled):
            found = await recovery_mismatches(
                settings.kafka_bootstrap, tables_dir, settings.app_id, table_name(channel)
            )
            assert not found, f"kill {kill + 1}: " + "\n".join(map(str, found[:10]))
        await asyncio.to_thread(stack.worker.start)
