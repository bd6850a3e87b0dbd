"""SAGALINE_LOG_FORMAT=json: one JSON object per line, with the record's ids and position."""

from __future__ import annotations

import importlib
import io
import json
import logging
from collections.abc import Iterator

import pytest

from runtime.logformat import JsonFormatter, dict_config, log_context
from services import logsafe

pytestmark = pytest.mark.unit


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    logsafe.install()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


def _read(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_carries_what_is_bound_around_it_and_nothing_after(lines: io.StringIO) -> None:
    log = logging.getLogger("test.json")
    with log_context(topic="t.order-saga", partition=3, offset=41, saga_id=None) as bound:
        log.info("decoded")
        bound.update(message_id="m-1", saga_id="o-1", causation_id="c-0")
        log.warning("dead-lettering %s", "it")
    log.info("outside")
    first, second, third = _read(lines)
    assert first["message"] == "decoded" and first["level"] == "INFO"
    assert (first["topic"], first["partition"], first["offset"]) == ("t.order-saga", 3, 41)
    assert "saga_id" not in first  # None is left out
    assert second["message"] == "dead-lettering it"
    assert (second["message_id"], second["saga_id"], second["causation_id"]) == (
        "m-1",
        "o-1",
        "c-0",
    )
    assert third["logger"] == "test.json" and "topic" not in third


def test_an_exception_is_one_line_and_keys_stay_out(lines: io.StringIO) -> None:
    log = logging.getLogger("test.json")
    try:
        raise ValueError("sent Authorization: Bearer sgl_0123456789ab_secretsecret")
    except ValueError:
        log.exception("failed")
    [line] = lines.getvalue().splitlines()
    record = json.loads(line)
    assert "ValueError" in str(record["exception"])
    assert "secretsecret" not in line


def test_the_worker_gets_a_json_config_only_when_asked() -> None:
    assert dict_config("INFO", "text") is None
    config = dict_config("info", "json")
    assert config is not None and config["root"]["level"] == "INFO"
    module, _, name = config["formatters"]["json"]["()"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is JsonFormatter


def test_a_line_inside_a_span_carries_its_trace_and_span_ids(lines: io.StringIO) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    log = logging.getLogger("test.json")
    log.info("no span")
    with TracerProvider().get_tracer("t").start_as_current_span("step") as span:
        log.info("in the step")
    outside, inside = _read(lines)
    assert "trace_id" not in outside and "span_id" not in outside
    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
