"""Resuming at the stored positions after an assignment: every seek goes to the consumer's
own thread in one ``seek_wait`` (services/worker/faust_seam.seek_and_wait), never through
Faust's ``seek``, which calls aiokafka from the main thread while its fetcher runs in the
consumer thread (soak run 9's fetcher crash, RELIABILITY.md defect 11)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from services.worker.resume import resume_from_stored_positions


class FakeConsumer:
    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = assigned
        self.waited: list[dict[TP, int]] = []
        self.committed_seeks = 0

    def assignment(self) -> set[TP]:
        return self.assigned

    async def perform_seek(self) -> None:
        self.committed_seeks += 1

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        self.waited.append(dict(offsets))

    async def seek(self, tp: TP, offset: int) -> None:
        raise AssertionError("Faust's seek runs aiokafka on the wrong thread")


def runner(topic: str, stored: dict[int, int]) -> Any:
    return SimpleNamespace(
        input_topics=(topic,),
        positions=SimpleNamespace(forget=lambda: None),
        table=SimpleNamespace(load_position=lambda t, p: stored.get(p)),
    )


def app_with(consumer: FakeConsumer) -> Any:
    return SimpleNamespace(
        consumer=consumer, on_partitions_revoked=SimpleNamespace(connect=lambda f: f)
    )


def test_every_assigned_input_seeks_on_the_consumer_thread_at_once() -> None:
    assigned = {TP("orders", 0), TP("orders", 1), TP("orders-changelog", 0), TP("pay", 3)}
    consumer = FakeConsumer(assigned)
    runners = [runner("orders", {0: 41}), runner("pay", {3: 7})]
    resume_from_stored_positions(app_with(consumer), runners, "earliest")

    asyncio.run(consumer.perform_seek())

    assert consumer.committed_seeks == 1  # Faust's own seek to committed still comes first
    # One call: stored positions, the earliest record where none is stored, and nothing for
    # a partition no runner reads (the changelog).
    assert consumer.waited == [{TP("orders", 0): 41, TP("orders", 1): 0, TP("pay", 3): 7}]


def test_committed_keeps_faust_seek_where_nothing_is_stored() -> None:
    consumer = FakeConsumer({TP("orders", 0), TP("orders", 1)})
    resume_from_stored_positions(app_with(consumer), [runner("orders", {1: 5})], "committed")

    asyncio.run(consumer.perform_seek())

    assert consumer.waited == [{TP("orders", 1): 5}]
