"""SAGALINE_LOG_FORMAT=json on a real worker: Faust's lines and ours are JSON objects, and a
line about a record carries its ids and position."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from runtime.topics import ORDER_SAGA
from sagas.contracts import orders as oc
from sagas.messages import Envelope
from tests.integration.golden import T0
from tests.integration.harness import isolated_settings, produce_raw, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


def _json_lines(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


async def test_a_dead_lettering_line_names_the_record_it_is_about(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path, log_format="json")
    async with running_stack(settings, tmp_path) as stack:
        good = Envelope.wrap(
            oc.CancelOrder(),
            message_id="m-json-1",
            key="json-1",
            occurred_at=T0,
            saga_id="json-1",
            causation_id="c-json-0",
        )
        fields = {**json.loads(good.encode()), "type": "order.Teleport"}
        await produce_raw(settings, ORDER_SAGA, b"json-1", json.dumps(fields).encode())
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            lines = _json_lines(stack.worker.tail_log(10**7))
            about = [line for line in lines if line.get("message_id") == "m-json-1"]
            if about or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.3)
        assert about, stack.worker.tail_log()
        [line] = about
        assert line["level"] == "WARNING" and "dead-lettering" in line["message"]
        assert "unknown message type" in line["message"]
        assert (line["saga_id"], line["causation_id"]) == ("json-1", "c-json-0")
        assert line["topic"] == settings.topic(ORDER_SAGA)
        assert isinstance(line["partition"], int) and line["offset"] == 0
        # Faust's own lines are JSON too (its banner is printed, not logged).
        assert any("Ready" in str(x["message"]) for x in lines)
        assert all({"time", "level", "logger", "message"} <= x.keys() for x in lines)
