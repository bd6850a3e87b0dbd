"""A standby started on a fresh store holds its changelog whole (RELIABILITY.md, defect
10): a second worker joins a group whose first worker has written every table, is given
standbys of the first one's partitions, and starts them from offset 0 while its own active
partitions are recovered. Its standby stores, read after it stopped, must equal what their
changelogs recover; before the worker fixed Faust's empty active set
(``faust_seam.fetch_only_active_partitions``), aiokafka drained the standbys' first records
while the recovery paused its actives, and the stores lacked everything below where they
began. Each worker's log must also hold no batch the consumer drained and did not hand on
within a generation (the seam's report, ``faust_seam.report_dropped_records``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from faults.stores import recovery_mismatches
from runtime.topics import table_name
from sagas.catalog import running_channels
from tests.integration.harness import Worker, free_port, isolated_settings, running_stack

pytestmark = [pytest.mark.integration]

PRODUCTS = [f"standby-{i}" for i in range(12)]  # spread over the partitions


async def test_a_fresh_standby_holds_its_changelog_from_the_start(tmp_path: Path) -> None:
    async with running_stack(isolated_settings(tmp_path), tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, 1000)

        async def sell_round(tag: str) -> None:
            placed = [
                await stack.place([(product, 1)], customer=f"{tag}{i}")
                for i, product in enumerate(PRODUCTS * 3)
            ]
            outcomes = await stack.tail.wait_for(placed, 90)
            assert len(outcomes) == len(placed), f"{tag}: sagas never ended"

        await sell_round("alone")  # every changelog partition holds records from offset 0
        data = tmp_path / "second-worker"
        second = Worker(
            stack.settings.model_copy(update={"worker_web_port": free_port(), "data_dir": data}),
            tmp_path,
        )
        await asyncio.to_thread(second.start)
        try:
            await asyncio.sleep(5)  # the group rebalances; the second starts its standbys
            await sell_round("shared")
            await asyncio.sleep(2)  # its standbys read the round's last changelog records
        finally:
            await asyncio.to_thread(second.stop)
        for worker in (stack.worker, second):  # the seam's report (faust_seam)
            log = worker.log.read_text(errors="replace")
            dropped = [
                line
                for line in log.splitlines()
                if "the consumer took" in line and "a rebalance came between" not in line
            ]
            assert not dropped, "\n".join(dropped[:5])
        [tables_dir] = data.glob("v*/tables")
        settings = stack.settings
        checked = 0
        for channel in running_channels(settings.cdc_enabled):
            table = table_name(channel)
            found = await recovery_mismatches(
                settings.kafka_bootstrap, tables_dir, settings.app_id, table
            )
            assert not found, f"{table}: " + "\n".join(map(str, found[:10]))
            checked += 1
        assert checked
