"""Secrets never reach a log line: API keys, key hashes, ``Authorization`` values.

Nothing in Sagaline logs them on purpose (the API names a key by its id); this is the net
under that, for what a library might log (a request's headers in a debug line, an exception
that quotes its input). :func:`install` wraps the logging record factory, so every record
of every logger, whatever handler or library formats it, is cleaned as it is made.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A whole API key: keep its id (it names the key), drop the secret.
    (re.compile(r"\b(sgl_[0-9a-f]{12})_[A-Za-z0-9_-]+"), r"\1_***"),
    # A stored hash (services.keys): nothing of it.
    (re.compile(r"scrypt\$[0-9]+\$[0-9]+\$[0-9]+\$[A-Za-z0-9_=-]*\$[A-Za-z0-9_=-]*"), "scrypt$***"),
    # An Authorization header or a bearer token, however it is quoted.
    (
        re.compile(r"(?i)(authorization\b['\"]?\s*[:=,]\s*[(\[]?\s*(?:b?['\"])?)[^'\"\r\n,)\]]+"),
        r"\1***",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
)


def redact(text: str) -> str:
    for pattern, replacement in REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


def install() -> None:
    """Clean every log record from now on (idempotent)."""
    current = logging.getLogRecordFactory()
    if getattr(current, "redacts_secrets", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        _clean(record)
        return record

    factory.redacts_secrets = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def _clean(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: the handler will report it, as it would have
        return
    cleaned = redact(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        cleaned_text = redact(text)
        if cleaned_text != text:
            record.exc_text = cleaned_text
