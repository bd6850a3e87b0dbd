"""Housekeeping shared by every test directory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.harness import BOOTSTRAP, PREFIXES, broker_reachable


@pytest.fixture(scope="module", autouse=True)
def _delete_the_module_s_topics() -> Iterator[None]:
    """After a test module, delete the topics of every prefix its tests took (their names,
    their changelogs and Faust's own topics all start with it): a full run makes thousands
    of partitions, and a local broker keeps them across runs."""
    taken = len(PREFIXES)
    yield
    prefixes = tuple(PREFIXES[taken:])
    if prefixes and broker_reachable():
        asyncio.run(_delete(prefixes))


async def _delete(prefixes: tuple[str, ...]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        await admin.start()
        doomed = [t for t in await admin.list_topics() if t.startswith(prefixes)]
        for at in range(0, len(doomed), 100):
            await admin.delete_topics(doomed[at : at + 100])
        # The broker deletes in the background: the next module starts once they are gone,
        # so its own topics are not created while the metadata still churns (a topic just
        # created then takes a moment to be listed).
        for _ in range(150):
            if not any(t.startswith(prefixes) for t in await admin.list_topics()):
                break
            await asyncio.sleep(0.2)
    except Exception:  # housekeeping: a broker a test stopped on purpose keeps its topics
        pass
    finally:
        await admin.close()
