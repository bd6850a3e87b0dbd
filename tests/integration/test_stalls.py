"""The worker's stall check (services/worker/stalls.py) against the real broker's offsets: a
partition with a record past its position is called stalled; one whose end offset lies past
its position only by a transaction's commit marker is not (the marker is an offset no
consumer ever sees, so "end offset > position" alone would call it stalled for ever)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faust.types import TP

from services.worker.kafka_ports import OffsetProbe
from services.worker.stalls import StallWatch, Watched, check_stalls
from tests.integration.harness import BOOTSTRAP, isolated_settings, scratch_topic

pytestmark = [pytest.mark.integration]


async def test_a_record_past_the_position_stalls_and_a_commit_marker_does_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await scratch_topic("stalls", 2)
    plain = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
    await plain.start()
    try:
        for i in range(3):  # partition 0: offsets 0, 1, 2
            await plain.send_and_wait(topic, b"r%d" % i, partition=0)
    finally:
        await plain.stop()
    txn = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=f"{topic}-txn")
    await txn.start()
    try:
        async with txn.transaction():  # partition 1: offsets 0, 1, and the marker at 2
            for i in range(2):
                await txn.send(topic, b"t%d" % i, partition=1)
    finally:
        await txn.stop()
    ends = await _end_offsets(topic)
    assert ends == {TP(topic, 0): 3, TP(topic, 1): 3}

    # The worker has processed offset 0 of partition 0 and both records of partition 1.
    positions = {(topic, 0): 1, (topic, 1): 2}
    probe = OffsetProbe(isolated_settings(tmp_path))
    clock = [0.0]
    app = SimpleNamespace(
        rebalancing=False,
        in_recovery=False,
        loop=SimpleNamespace(time=lambda: clock[0]),
        consumer=SimpleNamespace(assignment=lambda: set(ends), highwater=ends.__getitem__),
    )
    watched = {topic: Watched(lambda t, p: positions[(t, p)], probe.first_at_or_after)}
    watch = StallWatch(after_s=5)
    counts: list[int] = []
    try:
        with caplog.at_level(logging.ERROR, logger="services.worker.stalls"):
            await check_stalls(app, watched, watch, counts.append)
            clock[0] = 5.0
            await check_stalls(app, watched, watch, counts.append)
    finally:
        await probe.close_on_signal()
    assert counts == [0, 1]
    assert [r.getMessage() for r in caplog.records if r.name == "services.worker.stalls"] == [
        f"stalled: {topic}[0]: a record waits at offset 1 (end offset 3) and nothing was "
        "processed from offset 1 for 5 s; the partition's records are not being processed"
    ]


async def _end_offsets(topic: str) -> dict[TP, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        ends = await consumer.end_offsets(tps)
        return {TP(tp.topic, tp.partition): int(ends[tp]) for tp in tps}
    finally:
        await consumer.stop()
