"""Faust's recovery seeking a standby that a rebalance added while it finished: the
partition's offset was never built (``None``), aiokafka refuses to seek there, and the
Recovery service crashed, stopping the worker (RELIABILITY.md, defect 12). With the seam's
patch such a partition is sought to the start, as Faust seeks one with no persisted offset."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from faust.tables.recovery import Recovery
from faust.types import TP

from services.worker import faust_seam

BUILT, NEW = TP("t-changelog", 0), TP("t-changelog", 1)


class Consumer:
    def __init__(self) -> None:
        self.sought: dict[TP, int] = {}

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        for offset in offsets.values():
            # aiokafka's own check (AIOKafkaConsumer.seek)
            if not isinstance(offset, int) or offset < 0:
                raise ValueError("Offset must be a positive integer")
        self.sought.update(offsets)


def seek(offsets: Counter[Any]) -> dict[TP, int]:
    consumer = Consumer()
    asyncio.run(Recovery._seek_offsets(object(), consumer, {BUILT, NEW}, offsets, "standby"))
    return consumer.sought


def test_the_consumer_here_refuses_what_aiokafka_refuses() -> None:
    with pytest.raises(ValueError, match="positive integer"):
        asyncio.run(Consumer().seek_wait({NEW: None}))  # type: ignore[dict-item]


def test_an_offset_never_built_is_sought_from_the_start() -> None:
    faust_seam.seek_unread_changelogs_from_the_start()
    faust_seam.seek_unread_changelogs_from_the_start()  # once, however often asked
    assert seek(Counter({BUILT: 41, NEW: None})) == {BUILT: 41, NEW: 0}
    assert seek(Counter({BUILT: -1})) == {BUILT: 0, NEW: 0}  # missing: as -1 is
