"""What `sagaline topics create` creates does not depend on which worker features are on."""

from __future__ import annotations

import pytest

from runtime.settings import Settings
from runtime.topics import CHANGELOG_CONFIG, LEGACY_INGEST, changelog_topic, declared_topics

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("cdc_enabled", [False, True])
def test_the_cdc_ingest_changelog_is_declared_whether_cdc_is_on_or_not(cdc_enabled: bool) -> None:
    # `make run` creates the topics with the default settings, then starts a worker with
    # SAGALINE_CDC_ENABLED=true: that worker refused to start on a missing changelog.
    settings = Settings.model_construct(cdc_enabled=cdc_enabled, cdc_topic_partitions=3)
    specs = {s.name: s for s in declared_topics(settings)}
    ingest = specs[changelog_topic(settings, LEGACY_INGEST)]
    assert ingest.partitions == 3 and ingest.config == CHANGELOG_CONFIG
    assert {s.name for s in declared_topics(Settings.model_construct())} == {
        s.name for s in declared_topics(Settings.model_construct(cdc_enabled=True))
    }
