"""A worker's local stores, judged by their last applied changelog record on the real
broker: kept when it is recent, discarded when older than the tombstone retention allows,
and the worker then recovers the partition from its changelog."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import CHANGELOG_CONFIG, create_topics, declared_topics, tombstone_retention
from services.worker.faust_seam import partition_stores, table_dirs
from services.worker.stale_stores import Returning, judge, persisted_offset
from tests.integration.harness import Worker, free_port, isolated_settings, running_stack

pytestmark = [pytest.mark.integration]


async def test_a_recent_store_is_kept_an_old_one_discarded_and_recovered(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    async with running_stack(settings, tmp_path) as stack:
        await stack.set_stock("fig", 5)
        first = await stack.place([("fig", 1)])
        assert (await stack.tail.wait_for([first], 30))[first].status == "CONFIRMED"
        await asyncio.to_thread(stack.worker.stop)
        [tables] = table_dirs(settings.data_dir)
        returning = [
            Returning(None, f"{settings.app_id}-{table}-changelog", partition, path)
            for table, partition, path in partition_stores(tables)
        ]
        written = [r for r in returning if persisted_offset(r.path) is not None]
        assert written  # the partitions it wrote hold a persisted offset
        # judged now: the stores it wrote are young; those it never wrote hold no offset
        await judge(settings, returning)
        assert all(r.path.exists() for r in written)
        # as if the worker had been down for a day and more
        later = datetime.now(UTC) + timedelta(days=2)
        lines = await judge(settings, written, clock=lambda: later)
        assert len(lines) == len(written)
        assert all("ago; Faust recovers it from its changelog" in line for line in lines)
        assert not any(r.path.exists() for r in written)
        await asyncio.to_thread(stack.worker.start)
        # recovered from the changelogs: the stock remembers the first sale
        second = await stack.place([("fig", 1)])
        assert (await stack.tail.wait_for([second], 30))[second].status == "CONFIRMED"
        fig = await stack.wait_stock("fig", lambda f: f["on_hand"] == 3)
        assert fig["reserved"] == 0


async def test_a_store_closed_longer_than_the_retention_is_not_reopened(tmp_path: Path) -> None:
    """A partition taken from a running worker and given back after the changelogs'
    tombstone retention: the worker discards the store it kept on disk and recovers the
    partition from its changelog (soak soaka21559 reopened such a store, and retired sagas
    came back at an older step)."""
    settings = isolated_settings(tmp_path, table_standby_replicas=0)
    retention_s = 1.0
    await create_topics(settings)
    await _shorten_tombstone_retention(settings, retention_s)  # the worker asks at its start
    async with running_stack(settings, tmp_path) as stack:
        products = [f"p{i}" for i in range(8)]
        for product in products:
            await stack.set_stock(product, 5)
        orders = [await stack.place([(p, 1)]) for p in products]
        outcomes = await stack.tail.wait_for(orders, 60)
        assert {outcomes[o].status for o in orders} == {"CONFIRMED"}
        other = Worker(
            settings.model_copy(
                update={"data_dir": tmp_path / "other-data", "worker_web_port": free_port()}
            ),
            tmp_path / "other",
        )
        (tmp_path / "other").mkdir()
        await asyncio.to_thread(other.start)  # takes half of the partitions
        try:
            await _wait_for(lambda: "closing db" in stack.worker.log.read_text(), 60)
            await asyncio.sleep(3 * retention_s)
        finally:
            await asyncio.to_thread(other.stop)  # gives them back
        await _wait_for(lambda: "discarded the local store" in stack.worker.log.read_text(), 60)
        lines = [
            line
            for line in stack.worker.log.read_text().splitlines()
            if "discarded the local store" in line
        ]
        assert all("ago; Faust recovers it from its changelog" in line for line in lines), lines
        # recovered from the changelogs: every stock remembers its sale
        again = [await stack.place([(p, 1)]) for p in products]
        outcomes = await stack.tail.wait_for(again, 60)
        assert {outcomes[o].status for o in again} == {"CONFIRMED"}
        for product in products:
            await stack.wait_stock(product, lambda s: s["on_hand"] == 3 and s["reserved"] == 0)


async def _shorten_tombstone_retention(settings: Settings, seconds: float) -> None:
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        config = {**CHANGELOG_CONFIG, "delete.retention.ms": str(int(seconds * 1000))}
        changelogs = [s.name for s in declared_topics(settings) if s.config == CHANGELOG_CONFIG]
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, config) for name in changelogs]
        )
    finally:
        await admin.close()
    deadline = asyncio.get_running_loop().time() + 20  # the broker applies configs shortly after
    while await tombstone_retention(settings) != timedelta(seconds=seconds):
        assert asyncio.get_running_loop().time() < deadline, "retention not applied"
        await asyncio.sleep(0.5)


async def _wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.5)
