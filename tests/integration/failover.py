"""A worker lost among three: start two more workers beside a stack's, SIGKILL one while
orders keep coming, and time how soon every partition completes sagas again.

Used by ``tests/integration/test_failover.py`` (with standbys, against the bound) and by
``benchmarks/bench_failover.py`` (with and without standbys, on a longer history).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from runtime.partitioner import partition_for
from tests.integration.harness import Stack, Worker, free_port


@contextlib.asynccontextmanager
async def two_more_workers(stack: Stack, tmp: Path) -> AsyncIterator[list[Worker]]:
    """The stack's worker and two more, each with its own data directory and web port;
    the group has settled once this yields (each owns some partitions)."""
    others = []
    for name in ("second", "third"):
        logs = tmp / f"{name}-logs"
        logs.mkdir(exist_ok=True)
        update = {"worker_web_port": free_port(), "data_dir": tmp / f"{name}-worker"}
        others.append(Worker(stack.settings.model_copy(update=update), logs))
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in others))
    try:
        yield [stack.worker, *others]
    finally:
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in others))


def order_partition(stack: Stack, order: str) -> int:
    """The partition of the order saga's topic an order's saga runs in."""
    partitions = list(range(stack.settings.partitions))
    return partition_for(order.encode(), partitions, partitions)


@dataclass
class Steady:
    """Orders placed one every ``pause_s`` until stopped, with when each was placed."""

    stack: Stack
    products: list[str]
    pause_s: float
    placed: dict[str, float] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        i = 0
        while not stop.is_set():
            product = self.products[i % len(self.products)]
            order = await self.stack.place([(product, 1)], customer=f"f{i}")
            self.placed[order] = loop.time()
            self.lines[order] = [product]
            i += 1
            await asyncio.sleep(self.pause_s)

    def partition(self, order: str) -> int:
        return order_partition(self.stack, order)

    def back_after(self, killed_at: float) -> dict[int, float]:
        """Per partition of the order saga, seconds from ``killed_at`` to the first
        outcome of an order placed after it there (missing: none yet)."""
        back: dict[int, float] = {}
        for order, placed in self.placed.items():
            outcome = self.stack.tail.outcomes.get(order)
            if placed < killed_at or outcome is None:
                continue
            p = self.partition(order)
            back[p] = min(back.get(p, float("inf")), outcome.at - killed_at)
        return back


async def kill_and_time(
    stack: Stack, victim: Worker, products: list[str], pause_s: float, timeout_s: float
) -> tuple[dict[int, float], Steady]:
    """SIGKILL ``victim`` while orders keep coming; per partition, the seconds until it
    completed an order placed after the kill (a partition missing did not within
    ``timeout_s``). The orders keep coming until then; all of them are in the result."""
    steady = Steady(stack, products, pause_s)
    stop = asyncio.Event()
    placing = asyncio.create_task(steady.run(stop))
    loop = asyncio.get_running_loop()
    try:
        await asyncio.sleep(3)  # in full flow before the kill
        killed_at = loop.time()
        await asyncio.to_thread(victim.kill)
        deadline = killed_at + timeout_s
        while loop.time() < deadline:
            back = steady.back_after(killed_at)
            if len(back) == stack.settings.partitions:
                break
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await placing
    return steady.back_after(killed_at), steady
