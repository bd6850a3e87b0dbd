"""The console's dead-letter page reads one page of the topic, never the whole of it, and a
re-drive goes only to Sagaline's own process channels.

The broker is replaced by a log that counts the offsets it was asked for and the records it
gave out (the Kafka side of the same reader runs in tests/integration/test_console_browser.py
and test_deadletter_redrive.py)."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS, ORDER_SAGA, REDRIVES, changelog_topic
from sagas.catalog import CHANNELS
from services import deadletters
from services.deadletters import PREVIEW_CHARS, Letter, Record, Redrive, redrive_record
from services.worker.deadletter import DeadLetter
from tests.unit.test_console import Console, form_token

pytestmark = pytest.mark.unit

PAGE = 50
LETTERS = 120
VALUE_BYTES = 100_000
"""Each parked record's value: the whole topic is 12 MB, a page of trimmed letters tiny."""


@dataclass(frozen=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class CountingLog:
    """A one-partition topic from ``first`` on, that counts what it hands out."""

    kept: Sequence[tuple[bytes | None, bytes | None]]
    """(key, value) of each record, from offset ``first`` on."""
    first: int = 0
    asked: list[tuple[int, int]] = field(default_factory=list)
    given: int = 0
    given_bytes: int = 0

    async def bounds(self) -> tuple[int, int]:
        return self.first, self.first + len(self.kept)

    async def records(self, start: int, stop: int) -> AsyncIterator[Record]:
        self.asked.append((start, stop))
        for offset in range(max(start, self.first), min(stop, self.first + len(self.kept))):
            key, value = self.kept[offset - self.first]
            self.given += 1
            self.given_bytes += len(value or b"")
            yield offset, key, value


@dataclass
class FakeDesk:
    """The dead-letter desk over counting logs; a re-drive is recorded, not sent."""

    logs: dict[str, CountingLog]
    sent: list[Letter] = field(default_factory=list)

    @asynccontextmanager
    async def log(self, topic: str) -> AsyncIterator[CountingLog]:
        yield self.logs.setdefault(topic, CountingLog([]))

    async def resend(self, letter: Letter, forced: bool) -> Redrive:
        self.sent.append(letter)
        return Redrive(letter.source, 0, 7, forced, "2026-11-23T06:00:00+00:00")


def parked(topic: str, offset: int, value: bytes) -> bytes:
    record = Consumed(topic, 0, offset, f"o-{offset}".encode(), value)
    return DeadLetter.of(record, f"broken {offset}", "order-saga").encode()


def dead_letter_topic(settings: Settings, count: int, source: str | None = None) -> CountingLog:
    topic = source or settings.topic(ORDER_SAGA)
    values = [
        (b"k", parked(topic, n, f"v{n:03d}-".encode() * (VALUE_BYTES // 5))) for n in range(count)
    ]
    return CountingLog(values)


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[tuple[Console, FakeDesk]]:
    c = Console(tmp_path)
    desk = FakeDesk({c.settings.topic(DEAD_LETTERS): dead_letter_topic(c.settings, LETTERS)})
    c.app.state.dead_letter_desk = desk
    yield c, desk
    c.engine.dispose()


def _shown(text: str) -> list[int]:
    """The letter offsets a page lists, in order."""
    cells = text.split('data-label="Letter">')[1:]
    return [int(c.split("<")[0]) for c in cells]


async def test_a_page_reads_only_its_own_letters_newest_first(
    console: tuple[Console, FakeDesk],
) -> None:
    app, desk = console
    log = desk.logs[app.settings.topic(DEAD_LETTERS)]
    async with app.logged_in("read") as client:
        newest = await client.get("/console/deadletters")
        assert newest.status_code == 200
        assert log.asked == [(LETTERS - PAGE, LETTERS)] and log.given == PAGE
        assert log.given_bytes < (PAGE + 1) * (VALUE_BYTES + 1000)
        assert _shown(newest.text) == list(range(LETTERS - 1, LETTERS - PAGE - 1, -1))
        assert f'href="/console/deadletters?before={LETTERS - PAGE}"' in newest.text
        assert "Newest</a>" not in newest.text

        older = await client.get(f"/console/deadletters?before={LETTERS - PAGE}")
        assert log.asked[-1] == (LETTERS - 2 * PAGE, LETTERS - PAGE) and log.given == 2 * PAGE
        assert _shown(older.text) == list(range(LETTERS - PAGE - 1, LETTERS - 2 * PAGE - 1, -1))
        assert 'href="/console/deadletters"' in older.text  # back to the newest

        oldest = await client.get(f"/console/deadletters?before={LETTERS - 2 * PAGE}")
        assert log.asked[-1] == (0, LETTERS - 2 * PAGE)
        assert _shown(oldest.text) == list(range(LETTERS - 2 * PAGE - 1, -1, -1))
        assert "Older</a>" not in oldest.text
        assert f'href="/console/deadletters?before={LETTERS - PAGE}"' in oldest.text  # newer
    # The re-drive topic is read for the page's letters only: nothing else is kept.
    assert desk.logs[app.settings.topic(REDRIVES)].asked == [(0, 0)] * 3


async def test_a_letters_value_is_shown_cut_to_a_preview(
    console: tuple[Console, FakeDesk],
) -> None:
    app, _desk = console
    async with app.logged_in("read") as client:
        page = (await client.get("/console/deadletters")).text
    value = "v119-" * (VALUE_BYTES // 5)
    assert value[:PREVIEW_CHARS] + "…" in page
    assert value[: PREVIEW_CHARS + 5] not in page
    assert len(page) < PAGE * (PREVIEW_CHARS + 3000)


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"[" * 100_000, "nested deeper than"),
        (b'{"reason": "\\"' + b'\\"' * 50_000, "ends early"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "not a JSON object"),
        (None, "not a JSON object"),
    ],
)
async def test_a_record_on_the_topic_that_is_no_letter_is_listed_with_why(
    raw: bytes | None, said: str
) -> None:
    log = CountingLog([(None, raw)])
    page = await deadletters.read_page(log, None, PAGE)
    [listed] = page.letters
    assert said in listed.body["reason"] and listed.body["reason"].startswith("(not a dead letter")


def test_a_listed_letter_keeps_only_bounded_fields() -> None:
    huge = {"reason": "r" * 10**6, "value": "v" * 10**6, "nested": {"a": [1] * 1000}, "offset": 3}
    kept = deadletters.trimmed(huge)
    assert len(kept["reason"]) == deadletters.FIELD_CHARS + 1 and kept["reason_cut"] is True
    assert len(kept["value"]) == PREVIEW_CHARS + 1 and kept["offset"] == 3
    assert "nested" not in kept


async def test_past_the_topics_start_the_page_says_what_is_kept(
    console: tuple[Console, FakeDesk],
) -> None:
    app, desk = console
    desk.logs[app.settings.topic(DEAD_LETTERS)].first = 1000  # retention deleted 0-999
    async with app.logged_in("read") as client:
        gone = await client.get("/console/deadletters?before=10")
        newest = await client.get("/console/deadletters")
    assert gone.status_code == 200 and "keeps offsets 1000 and later" in gone.text
    assert _shown(newest.text)[0] == 1000 + LETTERS - 1


@pytest.mark.parametrize("before", ["-1", "x", "1" * 19, "1.5", "\u00b2"])  # "²" looks like a digit
async def test_a_malformed_page_offset_is_a_400_with_a_sentence(
    console: tuple[Console, FakeDesk], before: str
) -> None:
    app, desk = console
    async with app.logged_in("read") as client:
        response = await client.get("/console/deadletters", params={"before": before})
    assert response.status_code == 400 and "must be a whole number" in response.text
    assert desk.logs[app.settings.topic(DEAD_LETTERS)].asked == []


@pytest.mark.parametrize("target", ["events", "changelog", "foreign"])
async def test_a_redrive_to_a_topic_that_is_no_process_channel_is_refused(
    tmp_path: Path, target: str
) -> None:
    app = Console(tmp_path)
    topic = {
        "events": app.settings.topic(EVENTS),
        "changelog": changelog_topic(app.settings, ORDER_SAGA),
        "foreign": "payments.ledger",
    }[target]
    desk = FakeDesk({app.settings.topic(DEAD_LETTERS): dead_letter_topic(app.settings, 3, topic)})
    app.app.state.dead_letter_desk = desk
    try:
        async with app.logged_in("read", "admin") as client:
            listed = await client.get("/console/deadletters")
            assert "not re-driven from here" in listed.text
            assert 'aria-label="Re-drive letter' not in listed.text
            token = await form_token(client)
            refused = await client.post(
                "/console/deadletters/1/redrive", data={"form_token": token}
            )
    finally:
        app.engine.dispose()
    assert refused.status_code == 422
    text = html.unescape(refused.text)
    assert f"letter 1 came from {topic}, which is not one of Sagaline's process channels" in text
    assert app.settings.topic(ORDER_SAGA) in text
    assert desk.sent == []


async def test_a_redrive_to_a_process_channel_is_sent(console: tuple[Console, FakeDesk]) -> None:
    app, desk = console
    async with app.logged_in("read", "admin") as client:
        token = await form_token(client)
        done = await client.post(
            "/console/deadletters/42/redrive", data={"form_token": token, "before": "60"}
        )
    assert done.status_code == 200, done.text
    assert "Re-drove letter 42" in done.text
    assert [s.letter_offset for s in desk.sent] == [42]
    assert desk.sent[0].body["value"].startswith("v042-")  # the whole letter, not a preview
    assert _shown(done.text)[0] == 59  # the page the form was sent from
    assert desk.logs[app.settings.topic(DEAD_LETTERS)].asked[0] == (42, 43)


async def test_a_letter_redriven_before_is_refused_unless_forced(
    console: tuple[Console, FakeDesk],
) -> None:
    app, desk = console
    letter = Letter(
        42, {"source_topic": app.settings.topic(ORDER_SAGA), "partition": 0, "offset": 42}
    )
    earlier = Redrive(letter.source, 0, 7, False, "2026-11-23T06:00:00+00:00")
    desk.logs[app.settings.topic(REDRIVES)] = CountingLog(
        [(b"other:0:1", b"{}"), (letter.source.encode(), redrive_record(42, earlier))]
    )
    async with app.logged_in("read", "admin") as client:
        token = await form_token(client)
        listed = await client.get("/console/deadletters?before=60")
        again = await client.post("/console/deadletters/42/redrive", data={"form_token": token})
        forced = await client.post(
            "/console/deadletters/42/redrive", data={"form_token": token, "force": "yes"}
        )
    assert "re-driven 2026-11-23" in listed.text
    assert again.status_code == 409 and "was re-driven at" in again.text
    assert forced.status_code == 200 and "again (forced)" in forced.text
    assert len(desk.sent) == 1


async def test_an_unknown_letter_offset_is_a_404(console: tuple[Console, FakeDesk]) -> None:
    app, desk = console
    async with app.logged_in("read", "admin") as client:
        token = await form_token(client)
        missing = await client.post("/console/deadletters/500/redrive", data={"form_token": token})
    assert missing.status_code == 404 and "no dead letter at offset 500" in missing.text
    assert desk.sent == []


def test_the_redrive_topics_are_the_declared_process_channels() -> None:
    settings = Settings(topic_prefix="x")
    assert deadletters.redrive_topics(settings) == {f"x.{c.name}" for c in CHANNELS}
