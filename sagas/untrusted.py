"""Turn bytes from the outside into a JSON object, or a :class:`ContractError` saying why not.

Every record a component reads from Kafka passes through :func:`parse_object` before any
model sees it. Whatever the bytes are, the only exception that leaves is ``ContractError``
with a one-line reason of bounded length: a hostile record must be dead-lettered, never
crash a consumer (``json.loads`` alone raises ``RecursionError`` on ``[`` x 100,000, reads
UTF-16 when it guesses so, accepts ``NaN`` and integers of any length).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_RECORD_BYTES = 512 * 1024
"""Largest record value accepted. The biggest real envelope (an order of 100 lines) is a
few tens of KiB."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects; real envelopes nest fewer than 6 levels."""
MAX_INT_DIGITS = 19
"""Integers beyond 64 bits belong to no contract; refusing them early keeps ``int()`` cheap."""
MAX_NAME_LENGTH = 128
"""Longest object key (field name) in any JSON we accept."""
MAX_REASON_LENGTH = 300
"""Longest reason a ContractError carries: reasons travel in dead letters and logs."""


class ContractError(ValueError):
    """A record that does not satisfy any message contract. Goes to the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        super().__init__(bounded(reason))


def bounded(text: str, limit: int = MAX_REASON_LENGTH) -> str:
    """``text`` on one line, control characters escaped, cut to ``limit`` characters."""
    head = text[: limit * 4]  # never escape a megabyte just to throw most of it away
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in head)
    if len(shown) <= limit and len(head) == len(text):
        return shown
    return shown[: limit - 30] + f"... ({len(text)} characters)"


def parse_object(raw: bytes | str | None) -> dict[str, Any]:
    """The JSON object ``raw`` holds; raises :class:`ContractError` for anything else."""
    if raw is None:
        raise ContractError("empty record (no value)")
    if len(raw) > MAX_RECORD_BYTES:
        raise ContractError(f"record of {len(raw)} bytes is larger than {MAX_RECORD_BYTES}")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")  # strict: no guessing UTF-16, no replacement characters
        except UnicodeDecodeError as exc:
            raise ContractError(f"not JSON: not UTF-8 (invalid byte at {exc.start})") from None
    else:
        text = raw
    if too_deep(text):
        raise ContractError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except RecursionError:  # cannot happen after the depth check; kept as the last guard
        raise ContractError("not JSON: nested too deeply") from None
    except ValueError as exc:
        raise ContractError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ContractError("not a JSON object")
    _check_content(data)
    return data


# Strings (skipped whole, so brackets inside them do not count) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def too_deep(text: str) -> bool:
    """Whether ``text`` nests deeper than :data:`MAX_DEPTH`. A text with no more brackets
    than that cannot (two C-level counts); only the others are scanned, since the scan, a
    regex match per string and bracket, costs as much as parsing a record."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    return nesting_depth(text) > MAX_DEPTH


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of ``text``, counted in a loop (no recursion) that stops
    as soon as the limit is passed."""
    if "[" not in text and "{" not in text:
        return 0
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif token in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(digits)} digits is out of range")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {bounded(text, 40)} is out of range")
    return value


def _check_content(data: dict[str, Any]) -> None:
    """Field names short and printable, every text valid Unicode; a loop, not recursion."""
    pending: list[Any] = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for name, item in value.items():
                if len(name) > MAX_NAME_LENGTH:
                    raise ContractError(f"a field name of {len(name)} characters is too long")
                if not name.isprintable():
                    raise ContractError(f"field name {bounded(name, 60)} has control characters")
                pending.append(item)
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str) and not value.isascii() and not encodable(value):
            raise ContractError("a text is not valid Unicode (lone surrogate)")


def encodable(text: str) -> bool:
    """False for text holding a lone surrogate: valid in JSON, but no character, so it
    cannot be written as UTF-8 (to Kafka, to a database)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
