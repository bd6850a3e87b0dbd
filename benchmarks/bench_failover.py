"""Failover with and without standbys: three worker processes on the real broker, a history
of orders, then one worker SIGKILLed while orders keep coming; per partition, the seconds
until it completes an order placed after the kill.

    .venv/bin/python -m benchmarks.bench_failover --orders 20000 --standbys 0 1

Each run has its own topics (nothing shared between runs). The session timeout
(SAGALINE_SESSION_TIMEOUT_S, 10 s) is part of every figure: the group notices a SIGKILLed
member only when its session times out. The rest is the rebalance and the recovery of the
killed worker's partitions: from a standby's local copy (its changelogs' tail) or, without
standbys, from the changelogs of the partitions, whole.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from benchmarks.common import calibration, git_rev, machine
from runtime.topics import create_topics
from tests.integration.failover import kill_and_time, two_more_workers
from tests.integration.harness import Stack, isolated_settings, running_stack

PRODUCTS = [f"bf-{i}" for i in range(24)]
STOCK = 10_000_000


async def history(stack: Stack, orders: int, at_once: int = 100) -> float:
    """``orders`` orders placed ``at_once`` at a time; seconds until all have ended."""
    started = time.monotonic()
    placed: list[str] = []
    for first in range(0, orders, at_once):
        batch = [
            stack.place([(PRODUCTS[i % len(PRODUCTS)], 1)], customer=f"h{i}")
            for i in range(first, min(first + at_once, orders))
        ]
        placed.extend(await asyncio.gather(*batch))
    ended = await stack.tail.wait_for(placed, 900)
    assert len(ended) == len(placed), f"{len(placed) - len(ended)} history sagas never ended"
    return time.monotonic() - started


async def one_run(orders: int, standbys: int, tmp: Path) -> None:
    settings = isolated_settings(tmp, partitions=6, table_standby_replicas=standbys)
    await create_topics(settings)
    async with running_stack(settings, tmp) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        async with two_more_workers(stack, tmp) as workers:
            took = await history(stack, orders)
            print(f"standbys={standbys}: {orders} orders of history in {took:.0f} s", flush=True)
            await asyncio.sleep(5)  # the standbys read the last changelog records
            back, steady = await kill_and_time(stack, workers[1], PRODUCTS, 0.05, 240)
            missing = sorted(set(range(settings.partitions)) - set(back))
            shown = " ".join(f"p{p}={s:.1f}" for p, s in sorted(back.items()))
            worst = max(back.values()) if back else float("nan")
            print(
                f"standbys={standbys}: killed one of three workers; partitions processing "
                f"again after (s): {shown}; slowest {worst:.1f} s"
                + (f"; never within 240 s: {missing}" if missing else ""),
                flush=True,
            )
            ended = await stack.tail.wait_for(steady.placed, 300)
            print(
                f"standbys={standbys}: {len(ended)}/{len(steady.placed)} orders placed "
                "around the kill ended",
                flush=True,
            )


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}\ncommit: {git_rev()}", flush=True)
    for standbys in args.standbys:
        tmp = Path(f".local/bench-failover-{standbys}-{int(time.time())}")
        tmp.mkdir(parents=True)
        await one_run(args.orders, standbys, tmp)
    print(f"calibration at the end: {calibration()}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--standbys", type=int, nargs="+", default=[0, 1])
    asyncio.run(main(parser.parse_args()))
