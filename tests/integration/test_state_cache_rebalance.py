"""The worker's decoded-state cache across rebalances: partitions leave the first worker for
a second one, which sells from them, and come back when it stops. If the first worker served
a product's state it cached before the move, the units the second one sold would be missing
from (or counted twice in) the ledger's totals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.harness import Worker, free_port, isolated_settings, running_stack

pytestmark = [pytest.mark.integration]

PRODUCTS = [f"cache-{i}" for i in range(12)]  # spread over the partitions
STOCK = 1000


async def test_states_cached_before_a_rebalance_are_not_served_after_it(tmp_path: Path) -> None:
    async with running_stack(isolated_settings(tmp_path), tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        lines: dict[str, list[str]] = {}

        async def sell_round(tag: str) -> list[str]:
            placed = []
            for i, product in enumerate(PRODUCTS * 3):
                order = await stack.place([(product, 1)], customer=f"{tag}{i}")
                lines[order] = [product]
                placed.append(order)
            outcomes = await stack.tail.wait_for(placed, 90)
            assert len(outcomes) == len(placed), f"{tag}: sagas never ended"
            return placed

        await sell_round("alone")  # the first worker caches every product's state
        second = Worker(
            stack.settings.model_copy(
                update={"worker_web_port": free_port(), "data_dir": tmp_path / "second-worker"}
            ),
            tmp_path,
        )
        await asyncio.to_thread(second.start)
        try:
            await asyncio.sleep(5)  # the group rebalances: each worker owns some partitions
            await sell_round("shared")
        finally:
            await asyncio.to_thread(second.stop)  # its partitions come back to the first
        await sell_round("back")

        outcomes = await stack.tail.wait_for(list(lines), 30)
        assert {o.status for o in outcomes.values()} == {"CONFIRMED"}
        sold = await stack.assert_settled(outcomes, lines, dict.fromkeys(PRODUCTS, STOCK))
        assert sum(sold.values()) == len(lines) == 3 * 3 * len(PRODUCTS)
