"""Failover with standbys on the real broker: three worker processes, one standby of every
table partition (SAGALINE_TABLE_STANDBY_REPLICAS=1), orders flowing; one worker is
SIGKILLed. Every partition completes sagas again, and nothing is lost: every order accepted
before or after the kill ends once, and the stock adds up. How soon (the issue's bound is
the session timeout + 10 s: the group notices the death only when the session times out;
the rest is the rebalance and the standby's catch-up) is measured by
benchmarks/bench_failover.py on a quiet box, not asserted here: on a shared CI box a timed
bound only measures the neighbours. The test allows a minute and a half past the timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.failover import kill_and_time, order_partition, two_more_workers
from tests.integration.harness import isolated_settings, running_stack

pytestmark = [pytest.mark.integration]

PRODUCTS = [f"fo-{i}" for i in range(12)]
STOCK = 10_000


async def test_a_killed_workers_partitions_process_again_within_the_session_timeout(
    tmp_path: Path,
) -> None:
    settings = isolated_settings(tmp_path, partitions=6, table_standby_replicas=1)
    async with running_stack(settings, tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        async with two_more_workers(stack, tmp_path) as workers:
            history = {}
            for i in range(300):  # some history in every table before the kill
                product = PRODUCTS[i % len(PRODUCTS)]
                history[await stack.place([(product, 1)], customer=f"h{i}")] = [product]
            ended = await stack.tail.wait_for(history, 120)
            missing = {o: order_partition(stack, o) for o in history if o not in ended}
            assert not missing, f"never ended (order: its partition): {missing}"
            bound = settings.session_timeout_s + 90  # alive again, not how fast: see above
            back, steady = await kill_and_time(stack, workers[1], PRODUCTS, 0.05, bound + 20)
            assert set(back) == set(range(settings.partitions)), back
            assert max(back.values()) <= bound, back
            lines = {**history, **steady.lines}
            outcomes = await stack.tail.wait_for(lines, 120)
            assert len(outcomes) == len(lines), f"{len(lines) - len(outcomes)} sagas never ended"
            await stack.assert_settled(outcomes, lines, dict.fromkeys(PRODUCTS, STOCK))
