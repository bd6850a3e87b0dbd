"""A leader that assigned partitions without a topic's metadata asks for the metadata until
it has it (services/worker/faust_seam.rejoin_when_topics_appear): aiokafka rejoins on that
change; without the request it waited for its 5-minute metadata refresh, and the whole group
held no partition meanwhile (fault harness run 03195910a1, cycle 2)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from services.worker import faust_seam


class Cluster:
    """Metadata that learns the topics on the ``known_after``-th forced update."""

    def __init__(self, topics: set[str], known_after: int) -> None:
        self.topics, self.known_after, self.updates = topics, known_after, 0

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if topic in self.topics and self.updates < self.known_after:
            return None
        return {0, 1}


class Client:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def force_metadata_update(self) -> bool:
        self.cluster.updates += 1
        return True


def app_with(cluster: Cluster) -> Any:
    assignor = SimpleNamespace(assign=lambda cluster, members: {"m": "assignment"})
    consumer = SimpleNamespace(_ensure_consumer=lambda: SimpleNamespace(_client=Client(cluster)))
    return SimpleNamespace(assignor=assignor, consumer=SimpleNamespace(_thread=consumer))


def members(*topics: str) -> dict[str, Any]:
    return {"m": SimpleNamespace(subscription=list(topics))}


def test_missing_topics_are_asked_for_until_known() -> None:
    cluster = Cluster({"orders", "orders-changelog"}, known_after=3)
    app = app_with(cluster)
    faust_seam.rejoin_when_topics_appear(app, retry_s=0.001)

    async def run() -> Any:
        assignment = app.assignor.assign(cluster, members("orders", "orders-changelog", "known"))
        for _ in range(500):
            if not faust_seam._watching:
                break
            await asyncio.sleep(0.001)
        return assignment

    assert asyncio.run(run()) == {"m": "assignment"}  # Faust's assignment, unchanged
    assert cluster.updates == 3  # asked until known, then stopped
    assert not faust_seam._watching


def test_nothing_is_asked_when_every_topic_is_known() -> None:
    cluster = Cluster(set(), known_after=0)
    app = app_with(cluster)
    faust_seam.rejoin_when_topics_appear(app, retry_s=0.001)

    async def run() -> None:
        app.assignor.assign(cluster, members("orders"))
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert cluster.updates == 0
    assert not faust_seam._watching
