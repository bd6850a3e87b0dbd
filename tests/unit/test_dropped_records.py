"""The seam's report of records Faust's consumer drains but does not hand on
(services/worker/faust_seam.py, ``report_dropped_records``): a diagnostic for defect 10."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from services.worker.faust_seam import _reporting


@dataclass
class Rec:
    offset: int


class FakeConsumer:
    """What the wrappers touch: the drained batch, the app's generation, and Faust's getmany
    reduced to "hand on the records of the partitions in ``hand``"."""

    def __init__(self, drained: dict[str, list[Rec]], hand: set[str]) -> None:
        self.drained = drained
        self.hand = hand
        self.app = SimpleNamespace(consumer_generation_id=4)
        self.flow_active = True
        self.rebalance_midway = False


async def wait(self: FakeConsumer, timeout: float) -> Any:
    return self.drained, set(self.drained)


async def getmany(self: FakeConsumer, timeout: float) -> AsyncIterator[tuple[str, Rec]]:
    records, _ = await self._wait_next_records(timeout)
    if self.rebalance_midway:
        self.app.consumer_generation_id += 1
    for tp, recs in records.items():
        for rec in recs:
            if tp in self.hand:
                yield tp, rec


waiting, counted = _reporting(wait, getmany)
FakeConsumer._wait_next_records = waiting  # type: ignore[attr-defined]


async def handed(consumer: FakeConsumer) -> list[tuple[str, int]]:
    return [(tp, rec.offset) async for tp, rec in counted(consumer, 1.0)]


async def test_nothing_is_said_when_every_drained_record_is_handed_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = FakeConsumer({"cl-2": [Rec(0), Rec(1)], "cl-3": [Rec(7)]}, {"cl-2", "cl-3"})
    with caplog.at_level(logging.INFO):
        assert await handed(consumer) == [("cl-2", 0), ("cl-2", 1), ("cl-3", 7)]
    assert not caplog.records


async def test_records_taken_and_not_handed_on_are_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = FakeConsumer({"cl-2": [Rec(0), Rec(1), Rec(2712)], "cl-3": [Rec(7)]}, {"cl-3"})
    with caplog.at_level(logging.INFO):
        assert await handed(consumer) == [("cl-3", 7)]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "the consumer took 3 record(s) of cl-2 (offsets 0-2712) from the fetcher and handed on 0"
    )


async def test_a_rebalance_in_between_is_said_and_only_informs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = FakeConsumer({"cl-2": [Rec(5), Rec(6)]}, set())
    consumer.rebalance_midway = True
    with caplog.at_level(logging.INFO):
        assert await handed(consumer) == []
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage().endswith("handed on 0 (a rebalance came between)")


async def test_a_revocation_under_way_only_informs(caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer({"order-saga-1": [Rec(570), Rec(615)]}, set())
    consumer.flow_active = False  # a revocation: the generation not yet changed
    with caplog.at_level(logging.INFO):
        assert await handed(consumer) == []
    (record,) = caplog.records
    assert record.levelno == logging.INFO
