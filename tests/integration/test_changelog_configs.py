"""Changelog topic configs on the real broker: `topics create` sets them on new changelogs
and corrects existing ones, saying what changed, and keeps what else was set on a topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import (
    CHANGELOG_CONFIG,
    ORDER_SAGA,
    changelog_topic,
    correct_configs,
    create_topics,
    declared_topics,
)
from tests.integration.harness import isolated_settings

pytestmark = [pytest.mark.integration]


async def configs(settings: Settings, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        [(_, _, _, _, entries)] = response.resources
        return {name: value for name, value, *_ in entries}
    finally:
        await admin.close()


async def test_new_changelogs_get_the_config_and_old_ones_are_corrected_with_a_line(
    tmp_path: Path,
) -> None:
    settings = isolated_settings(tmp_path)
    changelog = changelog_topic(settings, ORDER_SAGA)
    # an existing changelog as an older version made it, with an operator's own setting
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        config = {"cleanup.policy": "compact", "max.message.bytes": "2000000"}
        await admin.create_topics(
            [NewTopic(changelog, settings.partitions, 1, topic_configs=config)]
        )
        for _ in range(100):  # listed once the broker's metadata has it (moments; longer
            if changelog in await admin.list_topics():  # while it deletes other topics)
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    created = await create_topics(settings)
    assert changelog not in created
    for spec in declared_topics(settings):
        if spec.name.endswith("-changelog") and spec.name != changelog:  # created just now
            have = await configs(settings, spec.name)
            assert {k: have[k] for k in CHANGELOG_CONFIG} == CHANGELOG_CONFIG, spec.name
    lines = await correct_configs(settings)
    assert lines == [
        f"{changelog}: segment.ms 604800000 -> 900000, segment.bytes 1073741824 -> 67108864, "
        "min.cleanable.dirty.ratio 0.5 -> 0.1, max.compaction.lag.ms 9223372036854775807 -> "
        "21600000"
    ]
    for _ in range(50):  # the broker applies an altered config within moments
        now = await configs(settings, changelog)
        if {k: now[k] for k in CHANGELOG_CONFIG} == CHANGELOG_CONFIG:
            break
        await asyncio.sleep(0.2)
    assert {k: now[k] for k in CHANGELOG_CONFIG} == CHANGELOG_CONFIG
    assert now["max.message.bytes"] == "2000000"  # the topic's own setting is kept
    assert await correct_configs(settings) == []  # nothing left to change
