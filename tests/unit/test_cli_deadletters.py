"""`sagaline deadletters` reads a page of the dead-letter topic, or one letter by its offset,
never the whole topic, and re-drives only to Sagaline's own process channels.

The broker is the counting fake of tests/unit/test_console_deadletters.py (the console goes
through the same reader); the CLI on the real broker:
tests/integration/test_deadletter_redrive.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from runtime.settings import Settings, get_settings
from runtime.topics import DEAD_LETTERS, EVENTS, ORDER_SAGA, REDRIVES
from sagaline.cli import main
from services import deadletters
from services.deadletters import Redrive, redrive_record
from tests.unit.test_console_deadletters import CountingLog, FakeDesk, dead_letter_topic

pytestmark = pytest.mark.unit

LETTERS = 120


@pytest.fixture
def desk(monkeypatch: pytest.MonkeyPatch) -> FakeDesk:
    """The desk every `sagaline deadletters` command gets, over 120 letters."""
    settings = get_settings()
    fake = FakeDesk({settings.topic(DEAD_LETTERS): dead_letter_topic(settings, LETTERS)})
    monkeypatch.setattr(deadletters, "DeadLetterDesk", lambda _settings: fake)
    return fake


def _run(*args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(main, ["deadletters", *args])


def _offsets(result: Result) -> list[int]:
    return [int(line.split()[0]) for line in result.stdout.splitlines()]


def _dead(desk: FakeDesk) -> CountingLog:
    return desk.logs[get_settings().topic(DEAD_LETTERS)]


def test_list_pages_newest_first_and_says_how_to_get_the_next_page(desk: FakeDesk) -> None:
    newest = _run("list", "--limit", "30")
    assert newest.exit_code == 0, newest.output
    assert _offsets(newest) == list(range(119, 89, -1))
    assert "sagaline deadletters list --before 90 --limit 30" in newest.stderr
    assert _dead(desk).asked == [(90, 120)] and _dead(desk).given == 30

    older = _run("list", "--before", "90", "--limit", "30")
    assert _offsets(older) == list(range(89, 59, -1))
    assert _dead(desk).asked[-1] == (60, 90)

    oldest = _run("list", "--before", "20")  # the default page (50) reaches the start
    assert _offsets(oldest) == list(range(19, -1, -1))
    assert "--before" not in oldest.stderr
    assert desk.logs[get_settings().topic(REDRIVES)].asked == [(0, 0)] * 3


def test_list_marks_a_redriven_letter_and_shows_a_record_that_is_no_letter(
    desk: FakeDesk,
) -> None:
    settings = get_settings()
    source = f"{settings.topic(ORDER_SAGA)}:0:119"
    done = Redrive(source, 0, 7, False, "2026-11-23T06:00:00+00:00")
    record = (source.encode(), redrive_record(119, done))
    desk.logs[settings.topic(REDRIVES)] = CountingLog([record])
    _dead(desk).kept = [*_dead(desk).kept, (None, b"[" * 1000)]
    listed = _run("list", "--limit", "2").stdout.splitlines()
    assert listed[0].split()[:2] == ["120", "parked"] and "not a dead letter" in listed[0]
    assert listed[1].split()[:2] == ["119", "re-driven"]


def test_past_the_topics_start_list_says_what_is_kept(desk: FakeDesk) -> None:
    _dead(desk).first = 1000
    gone = _run("list", "--before", "10")
    assert gone.exit_code == 0 and gone.stdout == ""
    assert "no dead letters on" in gone.stderr and "keeps offsets 1000 and later" in gone.stderr


@pytest.mark.parametrize("args", [["--limit", "0"], ["--limit", "501"], ["--before", "-1"]])
def test_a_page_out_of_bounds_is_refused_before_the_broker_is_asked(
    desk: FakeDesk, args: list[str]
) -> None:
    refused = _run("list", *args)
    assert refused.exit_code == 2 and "Invalid value" in refused.stderr
    assert _dead(desk).asked == []


def test_show_reads_the_one_letter_whole(desk: FakeDesk) -> None:
    shown = _run("show", "42")
    assert shown.exit_code == 0, shown.output
    letter = json.loads(shown.stdout)
    assert letter["value"].startswith("v042-") and len(letter["value"]) > 90_000
    assert letter["redriven"] is None
    assert _dead(desk).asked == [(42, 43)]


def test_show_of_an_unknown_offset_is_a_sentence(desk: FakeDesk) -> None:
    missing = _run("show", "500")
    assert missing.exit_code == 1 and "no dead letter at offset 500" in missing.stderr


def test_redrive_to_a_process_channel_is_sent_once(desk: FakeDesk) -> None:
    sent = _run("redrive", "42")
    assert sent.exit_code == 0, sent.output
    assert f"re-drove {get_settings().topic(ORDER_SAGA)}:0:42 to partition 0" in sent.stdout
    assert [s.letter_offset for s in desk.sent] == [42]
    assert _dead(desk).asked == [(42, 43)]


@pytest.mark.parametrize("target", ["foreign", "events"])
def test_redrive_to_a_topic_that_is_no_process_channel_is_refused(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    settings: Settings = get_settings()
    foreign = "payments.ledger" if target == "foreign" else settings.topic(EVENTS)
    fake = FakeDesk({settings.topic(DEAD_LETTERS): dead_letter_topic(settings, 3, foreign)})
    monkeypatch.setattr(deadletters, "DeadLetterDesk", lambda _settings: fake)
    refused = _run("redrive", "1")
    assert refused.exit_code == 1 and "Traceback" not in refused.stderr
    assert (
        f"letter 1 came from {foreign}, which is not one of Sagaline's process channels"
        in refused.stderr
    )
    assert settings.topic(ORDER_SAGA) in refused.stderr
    forced = _run("redrive", "1", "--force")
    assert forced.exit_code == 1 and "not one of Sagaline's process channels" in forced.stderr
    assert fake.sent == []
