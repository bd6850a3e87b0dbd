"""Where the worker resumes can never be past a record it has not processed.

Faust's committed offset is only a hint: these tests move it past unprocessed commands, and
expel the worker from its group mid-load, on the real broker.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.settings import Settings
from runtime.topics import ORDER_SAGA, topic_partitions
from tests.integration.harness import isolated_settings, running_stack

pytestmark = [pytest.mark.integration]

SESSION_TIMEOUT_S = 6.0


@asynccontextmanager
async def _as_the_group(
    settings: Settings, channel: str
) -> AsyncIterator[tuple[AIOKafkaConsumer, list[TopicPartition]]]:
    """A consumer in the worker's group (manually assigned) and the channel's partitions."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.app_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        yield consumer, await topic_partitions(consumer, settings.topic(channel))
    finally:
        await consumer.stop()


async def _commit_group_offsets_at_the_end(settings: Settings, channel: str) -> dict[int, int]:
    """Do what Faust's bookkeeping did once: commit the group's offsets past records the
    worker never processed. Retried until the dead worker has left the group."""
    async with _as_the_group(settings, channel) as (consumer, tps):
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        deadline = asyncio.get_running_loop().time() + 4 * SESSION_TIMEOUT_S
        while True:
            try:
                await consumer.commit(ends)
                return {tp.partition: offset for tp, offset in ends.items()}
            except KafkaError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(1)


async def _committed(settings: Settings, channel: str) -> dict[int, int]:
    async with _as_the_group(settings, channel) as (consumer, tps):
        return {tp.partition: (await consumer.committed(tp)) or 0 for tp in tps}


@pytest.mark.parametrize(
    "orders_before",
    # 0: no order-saga partition has a stored position yet (it must start at the earliest
    # record, not at the group's offset); 10: some have one, others may not.
    [0, 10],
)
async def test_a_group_offset_committed_past_unprocessed_commands_skips_none(
    tmp_path: Path, orders_before: int
) -> None:
    settings = isolated_settings(tmp_path, session_timeout_s=SESSION_TIMEOUT_S)
    async with running_stack(settings, tmp_path) as stack:
        await stack.set_stock("gap", 100)
        before = [await stack.place([("gap", 1)], customer=f"b{i}") for i in range(orders_before)]
        await stack.tail.wait_for(before, 60)
        await stack.wait_stock("gap", lambda f: f["on_hand"] == 100 - orders_before)
        # The last batches' states are stored up to a span after them (SAGALINE_STORE_EVERY_MS):
        # wait past it, so inventory has a stored position for the restart to resume at.
        await asyncio.sleep(settings.store_every_ms / 1000 + 1)

        await asyncio.to_thread(stack.worker.kill)
        after = [await stack.place([("gap", 1)], customer=f"a{i}") for i in range(30)]
        ends = await _commit_group_offsets_at_the_end(settings, ORDER_SAGA)
        assert await _committed(settings, ORDER_SAGA) == ends  # the group now skips them

        await asyncio.to_thread(stack.worker.start)
        outcomes = await stack.tail.wait_for(after, 60)
        assert len(outcomes) == 30, f"{30 - len(outcomes)} accepted orders were never processed"
        assert {o.status for o in outcomes.values()} == {"CONFIRMED"}
        left = 100 - orders_before - 30
        await stack.wait_stock("gap", lambda f: f["on_hand"] == left and f["reserved"] == 0)
        log = stack.worker.tail_log(200_000)
        assert "resuming at the stored position" in log  # inventory's, at least
        if orders_before == 0:
            assert "order-saga[0]: no stored position; starting at the earliest record" in log


PRODUCTS = [f"gap-{i}" for i in range(6)]
STOCK = 25


async def test_expelled_mid_load_then_killed_loses_no_accepted_order(tmp_path: Path) -> None:
    """SIGSTOP past the session timeout (the group expels the worker and its offsets may be
    committed by nobody or by a stale generation), SIGCONT, then SIGKILL and restart."""
    settings = isolated_settings(tmp_path, session_timeout_s=SESSION_TIMEOUT_S)
    async with running_stack(settings, tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        lines: dict[str, list[str]] = {}
        load = asyncio.create_task(
            stack.place_steadily(PRODUCTS, 300, lines, seed=11, pause_s=0.02, decline_every=10)
        )
        while len(stack.tail.outcomes) < 40:
            await asyncio.sleep(0.05)
        assert stack.worker.proc is not None
        stack.worker.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(SESSION_TIMEOUT_S * 2)  # expelled while records pile up
        stack.worker.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(3)  # rejoining, mid-batch
        await asyncio.to_thread(stack.worker.kill)
        await asyncio.to_thread(stack.worker.start)
        orders = await load

        outcomes = await stack.tail.wait_for(orders, 120)
        assert len(outcomes) == len(orders), f"{len(orders) - len(outcomes)} orders never ended"
        await stack.assert_settled(outcomes, lines, dict.fromkeys(PRODUCTS, STOCK))
