"""A dead letter always fits in one produce request, whatever the record it parks."""

import base64
import hashlib
from dataclasses import dataclass

import pytest

from runtime.settings import Settings
from sagas.contracts.deadletters import DeadLetterBody
from services.worker.deadletter import DEFAULT_INLINE_MAX_BYTES, MAX_REASON_LENGTH, DeadLetter

pytestmark = pytest.mark.unit

PRODUCER_MAX_REQUEST_BYTES = 1_000_000  # Faust's and the usual producer default
MB = 1_000_000


@dataclass(frozen=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _letter(key: bytes | None, value: bytes | None, reason: str = "bad") -> dict[str, object]:
    letter = DeadLetter.of(Consumed("t.order-saga", 3, 41, key, value), reason, "order-saga")
    raw = letter.encode()
    assert len(raw) + len(letter.key or b"") < PRODUCER_MAX_REQUEST_BYTES // 2
    return DeadLetter.decode(raw)


@pytest.mark.parametrize(
    "value",
    [
        b'{"payload": "' + b"x" * MB + b'"}',
        b"\xff" * MB,  # not UTF-8: base64 would add a third
        b"\x00" * (DEFAULT_INLINE_MAX_BYTES // 2),  # JSON writes each NUL as six bytes
        "\u4e2d".encode() * (DEFAULT_INLINE_MAX_BYTES // 4),  # six bytes per character
    ],
    ids=["1 MB JSON", "1 MB not UTF-8", "NULs", "CJK"],
)
def test_a_value_too_large_to_carry_is_named_by_its_digest_and_position(value: bytes) -> None:
    letter = _letter(b"o-1", value)
    assert letter["value"] is None and letter["value_inline"] is False
    assert letter["value_size"] == len(value)
    assert letter["value_sha256"] == hashlib.sha256(value).hexdigest()
    assert (letter["source_topic"], letter["partition"], letter["offset"]) == (
        "t.order-saga",
        3,
        41,
    )
    assert letter["key"] == "o-1" and letter["key_inline"] is True


def test_a_small_value_is_carried_inline_as_text_or_base64() -> None:
    assert _letter(b"k", b'{"a": 1}')["value"] == '{"a": 1}'
    letter = _letter(b"k", b"\xff not json")
    assert letter["value"] == "base64:" + base64.b64encode(b"\xff not json").decode()
    assert letter["value_inline"] is True and letter["value_size"] == 10


def test_a_huge_key_is_named_by_its_digest_in_the_letter_and_as_its_kafka_key() -> None:
    key = b"k" * MB
    record = Consumed("t.inventory", 0, 7, key, b"{}")
    letter = DeadLetter.of(record, "bad", "inventory")
    assert letter.key == b"sha256:" + hashlib.sha256(key).hexdigest().encode()
    body = DeadLetter.decode(letter.encode())
    assert body["key"] is None and body["key_size"] == MB and body["key_inline"] is False


def test_no_key_and_no_value_are_nulls() -> None:
    letter = _letter(None, None)
    assert (letter["key"], letter["value"]) == (None, None)
    assert "value_size" not in letter


def test_the_reason_is_cut_to_a_bounded_length() -> None:
    letter = _letter(b"k", b"{}", reason="why " * MB)
    assert len(str(letter["reason"])) <= MAX_REASON_LENGTH


def test_the_inline_limit_setting_keeps_two_parts_under_the_max_request_size() -> None:
    most = Settings.model_fields["deadletter_inline_max_bytes"].metadata
    le = next(m.le for m in most if getattr(m, "le", None) is not None)
    assert 2 * le + 16 * 1024 < PRODUCER_MAX_REQUEST_BYTES
    assert Settings.model_fields["deadletter_inline_max_bytes"].default == DEFAULT_INLINE_MAX_BYTES


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, None),
        (b"o-1", b'{"type": "order.Place"}'),
        (b"\xff\xfe", b"\x00\x01"),
        (b"k" * 2000, b"x" * (DEFAULT_INLINE_MAX_BYTES + 1)),
    ],
    ids=["nothing", "text", "binary", "not-inline"],
)
def test_a_letter_is_what_its_contract_in_the_asyncapi_document_says(
    key: bytes | None, value: bytes | None
) -> None:
    letter = DeadLetter.of(Consumed("t.order-saga", 3, 41, key, value), "bad", "order-saga")
    body = DeadLetterBody.model_validate_json(letter.encode())  # extra fields are refused
    assert (body.source_topic, body.partition, body.offset) == ("t.order-saga", 3, 41)
