"""Defect 13 (RELIABILITY.md) on the real broker: with Faust's read offsets, a seek back made
while Faust still delivers records it fetched before the seek is lost with nothing after it,
and a seek asked for again once those are through takes. With the worker's (Faust's filter
off for input topics: ``faust_seam.deliver_every_input_record``) the first seek takes; the
worker also asks again for a seek back whose expected record has not come, on a timer
(``resume.reseek_overdue_gaps``), should a seek be lost some other way.

Should a Faust upgrade deliver what a seek fetches again, the first test fails: the
patch may then go, after the fault harness says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.harness import BOOTSTRAP, scratch_topic

pytestmark = [pytest.mark.integration]

RECORDS = 3_000


async def test_a_seek_back_made_mid_fetch_is_lost_and_a_second_one_takes(tmp_path: Path) -> None:
    assert await seeks_back(tmp_path, "faust") == [0, 500]


async def test_with_the_workers_read_offsets_the_first_seek_back_takes(tmp_path: Path) -> None:
    assert await seeks_back(tmp_path, "worker") == [500, 500]


async def seeks_back(tmp_path: Path, reads: str) -> list[int]:
    """How many of offsets 0..499 each of the app's two seeks back brought again."""
    name = await scratch_topic("lost-seek", 1)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, linger_ms=5)
    await producer.start()
    try:
        for i in range(RECORDS):  # all there before the app fetches: big fetches
            await producer.send(name, b"x" * 50, key=str(i).encode())
    finally:
        await producer.stop()
    result = tmp_path / "result.json"
    app = [sys.executable, "-m", "tests.integration.lost_seek_app", BOOTSTRAP, name, str(result)]
    done = subprocess.run(
        [*app, reads, "worker", "-l", "warn"], capture_output=True, text=True, timeout=120
    )
    assert result.exists(), done.stderr[-3000:]
    below_after: list[int] = json.loads(result.read_text())
    return below_after
