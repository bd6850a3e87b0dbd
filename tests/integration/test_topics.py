"""Topic declarations against the real broker: refusals are reported, never swallowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.topics import TopicMismatch, check_topics, create_topics
from tests.integration.harness import isolated_settings

pytestmark = [pytest.mark.integration]


async def test_a_topic_the_broker_refuses_to_create_is_named_in_the_error(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path, replication_factor=3)  # one broker here
    with pytest.raises(TopicMismatch, match=r"refused to create .*order-saga.*replication"):
        await create_topics(settings)


async def test_check_reports_missing_topics_after_waiting_briefly(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    with pytest.raises(TopicMismatch, match="missing"):
        await check_topics(settings, wait_s=1.0)
    await create_topics(settings)
    await check_topics(settings)  # freshly created: listed within the wait
