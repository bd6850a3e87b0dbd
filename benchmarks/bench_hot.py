"""One hot product beside spread ones: does a product's rate fall as its history grows?

    python -m benchmarks.bench_hot [--spread-orders 2000] [--hot-orders 4000] [--products 200]

In one run, on one worker and the shared broker: single-line orders spread over
``--products`` products (the spread rate), then ``--hot-orders`` orders all for one product.
Every hot order closes one reservation and sends that product two commands, so 4,000 of
them leave a history four times the ledger's old window of 1,000 closed reservations and
sixteen times the machinery's 500 remembered message ids. Prints the hot rate over the whole
run and over each quarter of its outcomes, and as a fraction of the spread rate (issue 11: at
least 0.5x, and the last quarter as fast as the first). The ledger's window of closed
reservations fills during the first 1,000 hot orders, inside the first quarter; from the
second quarter on the record is as large as it gets, so last/second says whether the rate
falls with history once the window is full.

Both runs are closed loops: ``--in-flight`` orders under way, a new one sent as each ends.
(Sent all at once, every saga moves through its steps in step with the others and most
outcomes arrive in the last seconds: quarters of outcomes would say nothing.) In a closed
loop, a quarter's rate is what the chain, the hot product's ledger included, decides per
second with the history it has then. The first quarter is timed from the first outcome, so
it leaves out the start-up (every step's first round trip, before any saga can end).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from benchmarks.bench_sagas import envelope, order, run_orders
from benchmarks.common import (
    c_extensions,
    driver_collector_paused,
    git_rev,
    machine,
    run_settings,
    worker_bus_tail,
)
from runtime.topics import INVENTORY, ORDER_SAGA, create_topics
from sagas.contracts.ledger import SetCapacity
from services.bus import CommandBus
from services.event_tail import EventTail

HOT = "p0"
"""The hot product: ``order(i, 1)`` orders it."""


async def closed_loop(
    bus: CommandBus, tail: EventTail, n: int, products: int, in_flight: int
) -> tuple[float, list[float]]:
    """``n`` orders over ``products`` products, ``in_flight`` at a time (a new one as each
    ends); returns sagas/s over all of them, and over each quarter of the outcomes."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    waiting: set[str] = set()
    ends: list[float] = []
    sent = 0
    while len(ends) < n:
        more = min(in_flight - len(waiting), n - sent)
        if more > 0:
            items = [order(sent + i, products) for i in range(more)]
            waiting |= {order_id for order_id, _ in items}
            sent += more
            await bus.send_many([(ORDER_SAGA, env) for _, env in items])
        await asyncio.sleep(0.01)
        done = waiting & tail.outcomes.keys()
        waiting -= done
        ends += [tail.outcomes[i].at for i in done]
        if loop.time() - start > 1800:
            raise SystemExit(f"only {len(ends)} of {n} sagas ended in 30 minutes")
    ends.sort()
    quarter = n // 4
    # The first quarter from the first outcome, not from the first send: the time to the
    # first outcome is the chain's start-up (every step's first round trip), whatever the
    # history.
    bounds = [ends[0], *(ends[q * quarter - 1] for q in range(1, 4)), ends[-1]]
    counts = [quarter - 1, quarter, quarter, n - 3 * quarter]
    quarters = [c / (b - a) for c, a, b in zip(counts, bounds[:-1], bounds[1:], strict=True)]
    return n / (ends[-1] - start), quarters


def per_quarter(quarters: list[float]) -> str:
    return " / ".join(f"{q:,.0f}" for q in quarters)


async def main(args: argparse.Namespace) -> None:
    data, settings = run_settings(
        "benchhot",
        step_timeout_s=300,
        reservation_ttl_s=1200,
    )
    print(f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}")
    print(f"ext       {c_extensions()}")
    print(f"load      1-min load average before: {os.getloadavg()[0]:.2f}")
    await create_topics(settings)
    async with worker_bus_tail(settings, data) as (_workers, bus, tail):
        await bus.send_many(
            [
                (INVENTORY, envelope(SetCapacity(on_hand=10**9), f"p{i}"))
                for i in range(args.products)
            ]
        )
        await run_orders(bus, tail, 300, args.products, None)  # warm-up
        loop_args = (bus, tail)
        with driver_collector_paused():
            spread, s_q = await closed_loop(
                *loop_args, args.spread_orders, args.products, args.in_flight
            )
        print(
            f"spread    {args.spread_orders} single-line orders over {args.products} products, "
            f"{args.in_flight} in flight: {spread:,.0f} sagas/s (quarters {per_quarter(s_q)}/s)"
        )
        with driver_collector_paused():
            hot, h_q = await closed_loop(*loop_args, args.hot_orders, 1, args.in_flight)
        print(
            f"hot       {args.hot_orders} orders for one product, {args.in_flight} in flight: "
            f"{hot:,.0f} sagas/s = {hot / spread:.2f}x the spread rate; quarters "
            f"{per_quarter(h_q)}/s (last/first {h_q[-1] / h_q[0]:.2f}, "
            f"last/second {h_q[-1] / h_q[1]:.2f})"
        )
        print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spread-orders", type=int, default=2000)
    parser.add_argument("--hot-orders", type=int, default=4000)
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument(
        "--in-flight", type=int, default=200, help="orders under way at once (a closed loop)"
    )
    asyncio.run(main(parser.parse_args()))
