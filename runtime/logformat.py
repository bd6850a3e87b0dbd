"""How log lines look: text (the default) or, with ``SAGALINE_LOG_FORMAT=json``, one JSON
object per line, for log shippers.

A JSON line holds ``time``, ``level``, ``logger``, ``message`` (and ``exception`` with its
traceback), plus whatever :func:`log_context` has bound for the record being handled:
``saga_id``, ``message_id``, ``causation_id``, ``topic``, ``partition``, ``offset``. The
worker binds them around each input record and the projector around each record it
dead-letters, so every line logged meanwhile carries them, whichever logger writes it.
With tracing on (SAGALINE_TRACING), a line written inside a span also carries ``trace_id``
and ``span_id`` (W3C's hex forms, as trace UIs show and search them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

CONTEXT_FIELDS = ("saga_id", "message_id", "causation_id", "topic", "partition", "offset")

_context: ContextVar[dict[str, Any] | None] = ContextVar("sagaline_log_context", default=None)


@contextmanager
def log_context(**fields: Any) -> Iterator[dict[str, Any]]:
    """Bind ``fields`` (those of :data:`CONTEXT_FIELDS`; None values are left out) to every
    log line written inside; yields the bound dict, which may be filled in later (an
    envelope's ids become known once the record is decoded)."""
    bound = {**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(bound)
    try:
        yield bound
    finally:
        _context.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in (_context.get() or {}).items():
            if name in CONTEXT_FIELDS:
                line[name] = value
        span = trace.get_current_span().get_span_context()
        if span.is_valid:  # never without a tracer: no span is current then
            line["trace_id"] = format(span.trace_id, "032x")
            line["span_id"] = format(span.span_id, "016x")
        # exc_text first: services.logsafe leaves a traceback's cleaned text there (keys
        # redacted); formatting exc_info again would bring them back.
        if record.exc_text:
            line["exception"] = record.exc_text
        elif record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: str, log_format: str) -> None:
    """The root logger's one handler, to stderr, in ``log_format`` (``text`` or ``json``)."""
    logging.basicConfig(level=level, format=TEXT_FORMAT)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())


def dict_config(level: str, log_format: str) -> dict[str, Any] | None:
    """For Faust's worker (mode configures logging itself, with ``dictConfig``): None keeps
    its own colored text lines; ``json`` gets :class:`JsonFormatter` on stdout."""
    if log_format != "json":
        return None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stdout",
            }
        },
        "root": {"level": level.upper(), "handlers": ["default"]},
    }
