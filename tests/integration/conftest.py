"""Fixtures of the integration tests that need more than Kafka and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.jaeger import Jaeger, jaeger_up


@pytest.fixture(scope="session")
def jaeger() -> Iterator[Jaeger]:
    """The local Jaeger v2 (deploy/local/jaeger.sh): its query API and OTLP receivers."""
    yield from jaeger_up()
