"""The one JSON reader for bytes from outside: a value, or a refusal saying why not.

Every record a component reads from Kafka and every request body the API reads passes
through :func:`read_json`; records through :func:`parse_object`, which words the refusal
as a dead-letter reason (:class:`ContractError`), the API through its own 400 sentence
(``services.api.body``). Whatever the bytes are, the reader's cost is linear in their
length: msgspec's native parser (linear, no backtracking; it refuses NaN, Infinity,
lone surrogates and integers past 4,300 digits itself, and stops at Python's recursion
limit), then one iterative walk of what it built for what msgspec allows and no contract
holds (nesting past :data:`MAX_DEPTH`, integers past 64 bits, long or unprintable field
names). No regular expression reads untrusted text here. Measured against the standard
library and orjson in BENCHMARKS.md ("Issue 24"): ~9x faster than ``json.loads`` with the
hooks this module needed before, and orjson turns integers past 64 bits into floats.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_RECORD_BYTES = 512 * 1024
"""Largest record value accepted. The biggest real envelope (an order of 100 lines) is a
few tens of KiB."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects; real envelopes nest fewer than 6 levels."""
MAX_INT_DIGITS = 19
"""Integers beyond 64 bits belong to no contract."""
MAX_NAME_LENGTH = 128
"""Longest object key (field name) in any JSON we accept."""
MAX_REASON_LENGTH = 300
"""Longest reason a ContractError carries: reasons travel in dead letters and logs."""

_INT_BOUND = 10**MAX_INT_DIGITS
_DIGITS_AS_NINES = bytes.maketrans(b"012345678", b"999999999")
_NINES = b"9" * (MAX_INT_DIGITS + 1)
_ALL_BUT_QUOTES_AS_X = bytes(34 if byte == 34 else 120 for byte in range(256))
_XS = b"x" * (MAX_NAME_LENGTH + 1)
_NESTED_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
_decode = msgspec.json.Decoder().decode


class ContractError(ValueError):
    """A record that does not satisfy any message contract. Goes to the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        super().__init__(bounded(reason))


class JsonRefused(ValueError):
    """What :func:`read_json` refused, as a phrase each caller words its own way."""

    def __init__(self, problem: str) -> None:
        super().__init__(bounded(problem, 200))
        self.problem = str(self)
        self.too_deep = problem == _NESTED_TOO_DEEP


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more of the ASCII digits 0-9: what ``int`` reads as written.
    ``str.isdigit`` also takes '²' and other digits that ``int`` refuses with a ValueError."""
    return text.isascii() and text.isdigit()


def bounded(text: str, limit: int = MAX_REASON_LENGTH) -> str:
    """``text`` on one line, control characters escaped, cut to ``limit`` characters."""
    head = text[: limit * 4]  # never escape a megabyte just to throw most of it away
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in head)
    if len(shown) <= limit and len(head) == len(text):
        return shown
    return shown[: limit - 30] + f"... ({len(text)} characters)"


def read_json(raw: bytes | str) -> Any:
    """The JSON value ``raw`` holds (strict UTF-8, finite numbers, integers within 64 bits,
    nesting within :data:`MAX_DEPTH`, field names short and printable); raises
    :class:`JsonRefused` otherwise. Size limits are the caller's (they differ)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")  # msgspec refuses what is no UTF-8
    try:
        raw.decode("utf-8")  # strict: no guessing UTF-16, no replacement characters
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 (invalid byte at {exc.start})") from None
    try:
        value = _decode(raw)
    except RecursionError:
        raise JsonRefused(_NESTED_TOO_DEEP) from None
    except msgspec.DecodeError as exc:
        raise JsonRefused(_malformed(raw, str(exc))) from None
    if not _plainly_within_rules(raw):
        _check(value)
    return value


def _plainly_within_rules(raw: bytes) -> bool:
    """Whether ``raw`` cannot break a rule the walk checks, told by scans of the bytes in C
    (the walk costs 3-7 times the parse of an ordinary envelope): no more brackets than
    :data:`MAX_DEPTH`, no run of 20 digits (an integer past 64 bits has one), no stretch
    without a quote longer than :data:`MAX_NAME_LENGTH` (a long field name is one), and
    plain ASCII with no escape and no DEL (any other control character in a name needs an
    escape: the parser refuses raw ones)."""
    return (
        raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH
        and raw.isascii()
        and b"\\" not in raw
        and b"\x7f" not in raw
        and _NINES not in raw.translate(_DIGITS_AS_NINES)
        and _XS not in raw.translate(_ALL_BUT_QUOTES_AS_X)
    )


def parse_object(raw: bytes | str | None) -> dict[str, Any]:
    """The JSON object a Kafka record holds; raises :class:`ContractError` (a dead-letter
    reason) for anything else."""
    if raw is None:
        raise ContractError("empty record (no value)")
    if len(raw) > MAX_RECORD_BYTES:
        raise ContractError(f"record of {len(raw)} bytes is larger than {MAX_RECORD_BYTES}")
    try:
        data = read_json(raw)
    except JsonRefused as refused:
        raise ContractError(
            f"JSON {refused.problem}" if refused.too_deep else f"not JSON: {refused.problem}"
        ) from None
    if not isinstance(data, dict):
        raise ContractError("not a JSON object")
    return data


def _malformed(raw: bytes, message: str) -> str:
    """msgspec's message as a phrase: it says where, and what it found there."""
    message = message.removeprefix("JSON is malformed: ")
    if message.startswith("Input data was truncated"):
        return (
            "it ends early: an unclosed string, array or object, or a \\u escape "
            "without its second half (a lone surrogate)"
        )
    if message.startswith(("Number out of range", "Integer value out of range")):
        # (msgspec's path names no key of an untyped object: `$[...][0]`)
        return "a number is out of range (beyond a 64-bit float, or past 4,300 digits)"
    position = _byte_position(message)
    if message.startswith("invalid character") and position is not None:
        found = raw[max(position - 1, 0) : position + 9].decode("utf-8", "replace")
        for constant in ("-Infinity", "Infinity", "NaN"):
            if constant in found:
                return f"{constant} is not a number JSON allows (byte {position})"
    if "utf-16 surrogate pair" in message:
        return f"a lone surrogate \\u escape, no character ({message})"
    return message


def _byte_position(message: str) -> int | None:
    """The N of msgspec's ``(byte N)``, without a regular expression."""
    head, found, tail = message.rpartition("(byte ")
    digits = tail.removesuffix(")")
    return int(digits) if found and head and digits.isdigit() and len(digits) < 10 else None


def _check(value: Any) -> None:
    """Nesting, integers and field names, in one loop over what the parser built (no
    recursion: the loop's stack is a list)."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise JsonRefused(_NESTED_TOO_DEEP)
            for name, child in item.items():
                _check_name(name)
                if isinstance(child, dict | list):
                    pending.append((child, depth + 1))
                elif type(child) is int and not -_INT_BOUND < child < _INT_BOUND:
                    raise JsonRefused(_int_out_of_range(child))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                raise JsonRefused(_NESTED_TOO_DEEP)
            for child in item:
                if isinstance(child, dict | list):
                    pending.append((child, depth + 1))
                elif type(child) is int and not -_INT_BOUND < child < _INT_BOUND:
                    raise JsonRefused(_int_out_of_range(child))
        elif type(item) is int and not -_INT_BOUND < item < _INT_BOUND:
            raise JsonRefused(_int_out_of_range(item))


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME_LENGTH:
        raise JsonRefused(f"a field name of {len(name)} characters is too long")
    if not name.isprintable():
        raise JsonRefused(f"field name {bounded(name, 60)} has control characters")


def _int_out_of_range(value: int) -> str:
    # At most 4,300 digits (msgspec refuses more), so str() is cheap.
    return f"integer of {len(str(abs(value)))} digits is out of range"


def encodable(text: str) -> bool:
    """False for text holding a lone surrogate: valid in JSON, but no character, so it
    cannot be written as UTF-8 (to Kafka, to a database)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
