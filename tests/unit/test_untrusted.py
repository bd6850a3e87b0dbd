"""Hostile records: whatever the bytes, decoding ends in a ContractError with a short reason."""

import json

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sagas import untrusted
from sagas.contracts import ledger as lc
from sagas.messages import MAX_KEY_LENGTH, SCHEMA_VERSION, ContractError, Envelope
from sagas.untrusted import (
    MAX_DEPTH,
    MAX_NAME_LENGTH,
    MAX_REASON_LENGTH,
    MAX_RECORD_BYTES,
    bounded,
    parse_object,
)

from .helpers import envelope

pytestmark = pytest.mark.unit


def _good() -> dict[str, object]:
    reserve = lc.Reserve(reservation_id="r1", quantity=1, ttl_seconds=60)
    return dict(json.loads(envelope(reserve, key="p1").encode()))


def _with(**changes: object) -> bytes:
    return json.dumps({**_good(), **changes}).encode()


HOSTILE: dict[str, bytes | None] = {
    "no value": None,
    "not UTF-8": b"\xff\xfe\x00{}",
    "UTF-16 JSON": '{"a": 1}'.encode("utf-16"),
    "not JSON": b"{not json",
    "nested 100,000 deep": b"[" * 100_000,
    "closed nesting 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "objects nested deep": b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
    "NaN": b'{"a": NaN}',
    "Infinity": b'{"a": -Infinity}',
    "float overflow": b'{"a": 1e999}',
    "huge integer": b'{"a": ' + b"9" * 5_000 + b"}",
    "top level array": b"[1, 2]",
    "top level null": b"null",
    "wrong shape": json.dumps({"hello": "world"}).encode(),
    "future schema version": _with(schema_version=SCHEMA_VERSION + 1),
    "huge schema version": _with(schema_version=10**30),
    "oversized": json.dumps({**_good(), "pad": "x" * MAX_RECORD_BYTES}).encode(),
    "huge field name": json.dumps({**_good(), "k" * 100_000: 1}).encode(),
    "field name with control characters": json.dumps({**_good(), "a\x00\x1b[31m": 1}).encode(),
    "empty key": _with(key=""),
    "huge key": _with(key="p" * 100_000),
    "key with control characters": _with(key="p1\n\x1b[2J"),
    "lone surrogate": b'{"message_id": "\\ud800"}',
    "key not text": _with(key=["p1"]),
}


@pytest.mark.parametrize("raw", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_record_ends_in_a_contract_error_with_a_short_one_line_reason(raw):
    with pytest.raises(ContractError) as exc:
        Envelope.decode(raw)
    reason = str(exc.value)
    assert 0 < len(reason) <= MAX_REASON_LENGTH
    assert reason.isprintable(), reason


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff", "not JSON: not UTF-8"),
        (b"[" * 100_000, f"JSON nested deeper than {MAX_DEPTH} levels"),
        (b"[" * 33 + b"]" * 33, f"JSON nested deeper than {MAX_DEPTH} levels"),
        (b'{"a": NaN}', "not JSON: NaN is not a number JSON allows"),
        (b'{"a": ' + b"9" * 40 + b"}", "not JSON: integer of 40 digits is out of range"),
        (b'{"a": [-' + b"9" * 20 + b"]}", "not JSON: integer of 20 digits is out of range"),
        (b'{"a": 1e999}', "not JSON: a number is out of range"),
        (b'{"a": "\\ud800"}', "not JSON: it ends early"),
        (b'{"a": 1,}', "not JSON: trailing comma in object (byte 8)"),
        (b'{"' + b"k" * 200 + b'": 1}', "not JSON: a field name of 200 characters is too long"),
        (b'{"a\x7f": 1}', "not JSON: field name a\\x7f has control characters"),
        (b'{"a\\u0007": 1}', "not JSON: field name a\\x07 has control characters"),
        (b"x" * (MAX_RECORD_BYTES + 1), f"record of {MAX_RECORD_BYTES + 1} bytes is larger"),
        (_with(key="p" * 300), "bad envelope: key: Value error, has 300 characters, at most"),
        (_with(key="p\n1"), "bad envelope: key: Value error, has control characters"),
        (_with(key=""), "bad envelope: key: Value error, must not be empty"),
    ],
)
def test_the_reason_says_what_is_wrong(raw, expected):
    with pytest.raises(ContractError) as exc:
        Envelope.decode(raw)
    assert str(exc.value).startswith(expected), str(exc.value)


def test_brackets_inside_strings_do_not_count_as_nesting():
    deep_text = "[" * 1_000 + '\\"{' * 100
    data = parse_object(json.dumps({"note": deep_text, "list": [[[1]]]}))
    assert data["note"] == deep_text


def test_nesting_at_the_limit_is_accepted():
    raw = '{"a":' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    assert parse_object(raw) == json.loads(raw)


def test_a_key_at_the_limit_round_trips():
    env = envelope(lc.Confirm(reservation_id="r1"), key="k" * MAX_KEY_LENGTH)
    assert Envelope.decode(env.encode()).key == "k" * MAX_KEY_LENGTH


def test_an_unknown_type_and_a_null_payload_are_refused_with_their_reason():
    with pytest.raises(ContractError, match=r"unknown message type 'ledger\.Teleport'"):
        Envelope.decode(_with(type="ledger.Teleport")).message()
    with pytest.raises(ContractError, match="payload: Input should be a valid dictionary"):
        Envelope.decode(_with(payload=None))


def test_a_huge_unknown_type_name_is_not_echoed_in_full():
    env = Envelope.decode(_with(type="T" * 100_000))
    with pytest.raises(ContractError) as exc:
        env.message()
    assert len(str(exc.value)) <= MAX_REASON_LENGTH


def test_bounded_escapes_control_characters_and_says_how_long_the_text_was():
    assert bounded("a\nb\x00") == "a\\nb\\x00"
    cut = bounded("z" * 10_000, 100)
    assert len(cut) <= 100 and cut.endswith("(10000 characters)")


_names = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=8),
    st.text(
        st.characters(codec="ascii"), min_size=MAX_NAME_LENGTH - 2, max_size=MAX_NAME_LENGTH + 2
    ),
    st.sampled_from(["a\x7f", "\x7f", "\x1f", "\u2028", "é"]),
)
_leaves = st.one_of(st.integers(-(10**21), 10**21), st.text(max_size=20), st.booleans(), st.none())
_nested = st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3).map(lambda depth: _wrapped(depth))
_json_values = st.recursive(
    st.one_of(_leaves, _nested),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_names, inner, max_size=4)
    ),
    max_leaves=40,
)


def _wrapped(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@given(_json_values, st.booleans())
@example({"k" * (MAX_NAME_LENGTH + 1): 1}, True)
@example({"a\x7f": 1}, False)
@example([10**19], True)
@example(_wrapped(MAX_DEPTH + 1), True)
def test_the_scans_that_spare_the_walk_never_spare_it_for_a_value_it_would_refuse(value, ascii):
    raw = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    try:
        untrusted._check(msgspec.json.decode(raw))
    except untrusted.JsonRefused:
        assert not untrusted._plainly_within_rules(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass  # a lone surrogate: the parser refuses it before any scan
