"""A re-drive sends back exactly the record a letter parked: read from the letter when it is
inline (text or base64), checked against the letter's digests."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from runtime.settings import Settings
from sagas.contracts.deadletters import RedriveRecord
from services.deadletters import Letter, Redrive, RedriveRefused, original_record, redrive_record
from services.worker.deadletter import DeadLetter

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _letter(key: bytes | None, value: bytes) -> Letter:
    parked = DeadLetter.of(_Record("s.order-saga", 2, 41, key, value), "why", "order-saga")
    return Letter(7, json.loads(parked.encode()))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"order:o-1", b'{"id": "m-1"}'),
        (b"order:o-1", b"\xff\xfe not utf-8"),
        (None, b"{}"),
        (b"k", b"base64:looks-encoded-but-is-text"),
    ],
    ids=["text", "binary", "no key", "text that starts like base64"],
)
async def test_an_inline_letter_gives_back_its_exact_bytes(key: bytes | None, value: bytes) -> None:
    letter = _letter(key, value)
    assert letter.source == "s.order-saga:2:41"
    assert await original_record(Settings(), letter) == (key, value)


async def test_a_letter_whose_digest_disagrees_is_refused() -> None:
    letter = _letter(b"k", b"original")
    tampered = Letter(7, {**letter.body, "value": "something else"})
    with pytest.raises(RedriveRefused, match="another SHA-256"):
        await original_record(Settings(), tampered)


def test_the_redrive_topic_s_record_is_what_its_contract_says() -> None:
    done = Redrive("t.order-saga:2:17", 2, 30, forced=True, redriven_at="2026-01-02T03:04:05+00:00")
    record = RedriveRecord.model_validate_json(redrive_record(7, done))
    assert (record.letter_offset, record.partition, record.offset, record.forced) == (
        7,
        2,
        30,
        True,
    )
    assert json.loads(redrive_record(7, done))["redriven_at"].startswith("2026-01-02T03:04:05")
