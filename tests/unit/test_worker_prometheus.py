"""The worker's Prometheus series count what a batch did once it is stored, not attempts."""

from __future__ import annotations

import pytest

from sagas.contracts import ledger as lc
from services.worker.runner import DictTable, Incoming, ProcessRunner

from .test_runner import FakeKafka, incoming, runner

pytestmark = pytest.mark.unit


def _records(r: ProcessRunner, result: str) -> float:
    value = r.metrics.prom.registry.get_sample_value(
        "sagaline_worker_records_total", {"process": "inventory", "result": result}
    )
    return value or 0.0


async def test_a_batch_retried_after_failed_sends_is_counted_once() -> None:
    kafka, table = FakeKafka(fail=True), DictTable()
    r = runner(kafka, table)
    batch = [
        Incoming("t.inventory", 0, 0, b"p1", b"{not json"),
        incoming(lc.SetCapacity(on_hand=3), "p1", 1),
    ]
    with pytest.raises(ConnectionError):
        await r.handle_batch(batch)
    assert (_records(r, "processed"), _records(r, "dead_lettered")) == (0, 0)
    kafka.fail = False
    await r.handle_batch(batch)
    copy = incoming(lc.SetCapacity(on_hand=3), "p1", 2, message_id="m1")
    await r.handle_batch([copy])
    assert _records(r, "processed") == 1
    assert _records(r, "dead_lettered") == 1
    assert _records(r, "duplicate") == 1
