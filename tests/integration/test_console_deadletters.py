"""The console's dead-letter reader on the real broker: a page is the offsets just before
``before`` and nothing past them, each fetch is bounded, and a letter is read whole by its
offset. (The paging and the re-drive's allow-list over a counting fake of this reader:
tests/unit/test_console_deadletters.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, ORDER_SAGA, REDRIVES, create_topics
from services import deadletters
from services.deadletters import PREVIEW_CHARS, DeadLetterDesk
from services.worker.deadletter import DeadLetter
from tests.integration.harness import broker_reachable, isolated_settings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not broker_reachable(), reason="needs the Kafka broker"),
]

COUNT = 7
VALUE_BYTES = 200_000
"""Each letter carries a 200 KB value inline: seven are 1.4 MB, more than one fetch."""


@dataclass(frozen=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def _park(settings: Settings) -> None:
    producer = AIOKafkaProducer(**aiokafka_options(settings), max_request_size=2 * 1024 * 1024)
    await producer.start()
    try:
        for n in range(COUNT):
            source = settings.topic(ORDER_SAGA if n % 2 else EVENTS)
            value = f"{n}".encode() * VALUE_BYTES
            letter = DeadLetter.of(Consumed(source, 1, n, b"k", value), f"broken {n}", "order-saga")
            await producer.send_and_wait(settings.topic(DEAD_LETTERS), letter.encode(), key=b"k")
        await producer.send_and_wait(settings.topic(REDRIVES), b'{"offset": 1}', key=b"x:0:0")
    finally:
        await producer.stop()


async def test_pages_of_the_real_topic_read_only_their_offsets(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    await create_topics(settings)
    await _park(settings)
    desk = DeadLetterDesk(settings)
    async with desk.log(settings.topic(DEAD_LETTERS)) as log:
        assert isinstance(log, deadletters.KafkaLog)
        newest = await deadletters.read_page(log, None, 3)
        assert [x.letter_offset for x in newest.letters] == [6, 5, 4]
        assert (newest.older, newest.newest) == (4, True)
        seen = [o async for o, _k, _v in log.records(2, 4)]
        assert seen == [2, 3]  # nothing past the page's end is handed out
        middle = await deadletters.read_page(log, newest.older, 3)
        assert [x.letter_offset for x in middle.letters] == [3, 2, 1]
        last = await deadletters.read_page(log, middle.older, 3)
        assert [x.letter_offset for x in last.letters] == [0] and last.older is None
        whole = await deadletters.read_letter(log, 5)
        assert whole is not None and len(whole.body["value"]) == VALUE_BYTES
        assert await deadletters.read_letter(log, COUNT) is None
    listed = newest.letters[0].body
    assert len(listed["value"]) == PREVIEW_CHARS + 1 and listed["value_cut"] is True
    allowed = deadletters.redrive_topics(settings)
    assert [x.body["source_topic"] in allowed for x in middle.letters] == [True, False, True]
    async with desk.log(settings.topic(REDRIVES)) as log:
        assert await deadletters.redrives_of(log, ["y:0:0"]) == {}
        assert await deadletters.redrives_of(log, ["x:0:0"]) == {"x:0:0": {"offset": 1}}
